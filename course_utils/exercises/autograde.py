"""The outside grader: the points of every autograded exercise, computed where the student's
code cannot reach them (INSTRUCTORS.md, "Grading outside the notebook").

At ``nbgrader autograde`` the notebook is **not run**. The preprocessor :class:`GradeOutside`
(set in nbgrader_config.py by ``scripts/nbgrader_tools.py source``, see :func:`configure`)
takes the place of nbgrader's ``Execute``. For each test cell it

* takes the answer's code from the submitted notebook by its syntax tree
  (:func:`.sandbox.answer_source`) and refuses code that holds what no answer needs
  (:func:`.sandbox.rules_broken`);
* runs that code in a fresh process isolated by bubblewrap (:func:`.sandbox.run_answer`) on
  the exercise's own test cases and on unseen ones (:func:`unseen_cases`, drawn from a salt
  kept in the course folder, one per lesson and release), and gets back plain outputs;
* grades those outputs in this process with the exercise's own check, replayed
  (:func:`feedback_from`): the same feedback, mistakes named, as in the notebook; the unseen
  cases are compared with the reference solutions run in another process from the
  instructor's ``solutions/`` (:func:`reference_outputs`);
* writes the result as the test cell's only output: text when correct, an error otherwise.
  nbgrader's ``SaveAutoGrades`` then records full points or none, whatever the student's
  notebook printed, displayed or raised.

The salt, the course's paths and the expected outputs never reach the answer's process, the
notebook or the feedback.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import html
import importlib
import json
import os
import re
import secrets as _secrets
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import cli
from ..attention.validation import is_real, plain_str, shown
from ..paths import check_path, path_kind
from . import cases as _cases
from . import sandbox
from .answers import lesson_name

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
SECRETS_NAME = ".course_grader.json"  # in the nbgrader course folder, beside gradebook.db


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


# -- the grader's secrets: in the course folder, never in a notebook -----------------------------
def _known_lessons(notebooks: Path) -> list[str]:
    """The lesson names (notebook names without .ipynb) in ``notebooks``: the keys of the salts."""
    return sorted(p.stem for p in notebooks.glob("[0-9][0-9]_*.ipynb"))


def write_secrets(course: Path, lessons: Sequence[str], solutions_dir: Path) -> Path:
    """Write ``course/.course_grader.json`` (owner-only): a new salt for each lesson (notebook
    name without .ipynb), the checks' manifest and the instructor's ``solutions/``. Called by
    ``nbgrader_tools.py source``: each release gets new salts. Returns the file. Every lesson
    must be one of the course's notebooks (``notebooks/NN_*.ipynb`` beside ``solutions_dir``),
    named once: a salt for any other name would never be used. ``course`` must lie outside the
    clone that holds ``solutions_dir`` (links followed; a ValueError, nothing written), as
    ``nbgrader_tools.py source`` holds its COURSE_DIR."""
    check_path(course, "course", "the course folder nbgrader works in")
    check_path(solutions_dir, "solutions_dir", "the instructor's solutions folder")
    lessons = _cases.listed(lessons, "lessons", "a non-empty list of lesson names")
    if isinstance(lessons, (str, bytes)) or not isinstance(lessons, Sequence) or not lessons \
            or not all(isinstance(x, str) and x for x in lessons):
        raise ValueError(f"lessons: expected a non-empty list of lesson names (notebook names without "
                         f".ipynb), got {shown(lessons, 80)}: without them the grader has no salts")
    if not Path(solutions_dir).is_dir():
        raise FileNotFoundError(f"solutions_dir: expected the instructor's solutions folder (solutions/ "
                                f"of the course's clone), but {solutions_dir} is not a folder")
    notebooks = Path(solutions_dir).parent / "notebooks"
    known = _known_lessons(notebooks)
    if not known:  # the folder is the wrong one, not the lessons (which were blamed)
        raise FileNotFoundError(f"solutions_dir: expected the instructor's solutions folder (solutions/ of "
                                f"the course's clone, notebooks/ beside it), but {notebooks} holds no "
                                f"lesson notebooks (NN_*.ipynb); got {solutions_dir}")
    clone = Path(solutions_dir).parent
    try:
        inside = cli.place_in(course, clone)  # as nbgrader_tools.py source refuses its COURSE_DIR
    except ValueError as err:
        raise ValueError(f"course: {err}") from None
    if inside is not None:
        raise ValueError(f"course: expected the nbgrader course folder outside the course's clone {clone} "
                         f"(the secrets would sit among the course's own files, where git and the release "
                         f"see them), got {course} ({inside}/ of the clone); nothing was written")
    unknown = [x for x in lessons if x not in known]
    if unknown:
        raise ValueError(f"lessons: expected names of the course's notebooks in {notebooks} (without "
                         f".ipynb), one of {known}, got {shown(unknown[0])}: a salt for it would never be "
                         "used")
    twice = next((x for i, x in enumerate(lessons) if x in lessons[:i]), None)
    if twice is not None:
        raise ValueError(f"lessons: expected each lesson once, got {shown(twice)} twice")
    path = Path(course) / SECRETS_NAME
    data = {"release": _secrets.token_hex(8), "manifest": manifest(),
            "solutions_dir": str(Path(solutions_dir).resolve()),
            "salts": {lesson: _secrets.randbelow(2**31 - 1) + 1 for lesson in lessons}}
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None  # nothing there yet (or no parent): the write below names any real cause
    if mode is not None and not stat.S_ISREG(mode):
        kind = ("a symbolic link" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode)
                else "not a regular file")
        raise ValueError(f"{path} is {kind}, expected the grader's secrets file or nothing: the "
                         "secrets are never written through a link or into a pipe; remove it and "
                         "run again")
    tmp = path.with_name(f"{SECRETS_NAME}.{os.getpid()}.{_secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A new owner-only file, renamed over the old one: an existing 0644 file never keeps its mode.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write the grader's secrets {path} ({exc.strerror}: "
                                 f"{exc.filename})") from None
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_secrets(course: Path) -> dict:
    """The grader's secrets of ``course``; raises FileNotFoundError naming the command to run, and
    ValueError naming the file and the entry for a salt that is not an int in 1..2**31 - 1 or a
    lesson that is not one of the notebooks beside its ``solutions_dir`` (as :func:`write_secrets`
    makes them; the lessons are not checked where that folder holds no notebooks). On POSIX it
    refuses, as :func:`write_secrets` never makes them, a link (another course's secrets) and a
    file others may read (its salts let a student compute the unseen cases): ValueError naming
    the file and its mode."""
    check_path(course, "course", "the course folder nbgrader works in")
    path = Path(course) / SECRETS_NAME
    kind = path_kind(path)  # the package's one description of what a path is (a loop is not "missing")
    if kind not in (None, "missing"):
        kind = "a folder" if kind == "a directory" else kind
        raise ValueError(f"{path} is {kind}, expected the grader's secrets file: remove it and run "
                         f"`python scripts/nbgrader_tools.py source {course}`")
    if kind == "missing":
        raise FileNotFoundError(f"{path} is missing: run `python scripts/nbgrader_tools.py source "
                                f"{course}` in the course's clone (it writes the grader's salts)")
    _check_secrets_mode(path, course)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not the grader's secrets file (not UTF-8 JSON: {err}); write a new "
                         f"one with `python scripts/nbgrader_tools.py source {course}`") from None
    if not isinstance(data, dict) or not isinstance(data.get("salts"), dict):
        raise ValueError(f"{path} is not the grader's secrets file (no 'salts' table); write a new one "
                         f"with `python scripts/nbgrader_tools.py source {course}`")
    solutions = data.get("solutions_dir")
    known = (_known_lessons(Path(solutions).parent / "notebooks")
             if isinstance(solutions, str) and "\0" not in solutions else [])
    for lesson, salt in data["salts"].items():
        if known and lesson not in known:
            problem = f"a salt for {shown(lesson)}, which is not one of the course's notebooks {known}"
        elif isinstance(salt, bool) or not isinstance(salt, int) or not 1 <= salt < 2**31:
            problem = (f"salts[{shown(lesson)}] = {type(salt).__name__} {shown(salt, 40)}, expected an "
                       f"int in "
                       "1..2**31 - 1")
        else:
            continue
        raise ValueError(f"{path} holds {problem} (the file was edited); write a new one with "
                         f"`python scripts/nbgrader_tools.py source {course}`")
    return data


def _check_secrets_mode(path: Path, course: Path) -> None:
    """``path`` (the secrets file, a regular file or a link to one) is owner-only and no link, as
    :func:`write_secrets` makes it (POSIX only: elsewhere the mode bits say nothing)."""
    if os.name != "posix":
        return
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise ValueError(f"{path} is a symbolic link (to {os.readlink(path)}), expected the grader's "
                         "secrets file itself: the secrets are never read through a link (it may be "
                         f"another course's); remove it and run `python scripts/nbgrader_tools.py source "
                         f"{course}`")
    if mode & 0o077:
        raise ValueError(f"{path} has mode {stat.filemode(mode)} ({mode & 0o777:04o}), expected owner-only "
                         f"(0600, as `nbgrader_tools.py source` writes it): others could read the salts "
                         f"that make the unseen cases; run `chmod 600 {path}` or write a new one with "
                         f"`python scripts/nbgrader_tools.py source {course}`")


# -- which cases, which expected outputs ---------------------------------------------------------
@contextlib.contextmanager
def salted_seeds(salt: int) -> Iterator[None]:
    """While active, every ``torch.Generator().manual_seed(s)``, ``torch.manual_seed(s)`` and
    ``np.random.default_rng(s)`` seeds with ``s`` mixed with ``salt``: the checks' case
    builders then make other inputs than the ones whose outputs ship with the package."""
    if isinstance(salt, bool) or not isinstance(salt, (int, np.integer)):
        raise TypeError(f"salt: expected an int (a lesson's salt from the grader's secrets), got "
                        f"{type(salt).__name__} {shown(salt, 60)}")
    salt = int(salt)  # a NumPy int as a Python one: no int64 overflow in the mixing below
    if salt < 0:  # write_secrets makes them in 1..2**31 - 1: a negative one is a mistake
        raise ValueError(f"salt: expected an int >= 0 (a lesson's salt from the grader's secrets), "
                         f"got {salt}")
    mixed = lambda seed: (int(seed) * 1_000_003 + salt) % 2**62  # noqa: E731

    class SaltedGenerator(torch.Generator):
        def manual_seed(self, seed: int) -> torch.Generator:
            return super().manual_seed(mixed(seed))

    generator, manual_seed, default_rng = torch.Generator, torch.manual_seed, np.random.default_rng
    torch.Generator = SaltedGenerator  # type: ignore[misc]
    torch.manual_seed = lambda seed: manual_seed(mixed(seed))  # type: ignore[assignment]
    np.random.default_rng = lambda seed=None: default_rng(None if seed is None else mixed(seed))
    _cases._UNSEEN_SALT.append(int(salt))  # sizes too: cases.seen_or_unseen
    try:
        yield
    finally:
        torch.Generator, torch.manual_seed = generator, manual_seed  # type: ignore[misc]
        np.random.default_rng = default_rng
        _cases._UNSEEN_SALT.pop()


def cases_of(exercise: Any, salt: int | None = None) -> list[Any]:
    """The one place the grader asks an exercise for its test cases: its own (``salt`` None: the
    stored inputs, the same bytes on every machine), or unseen ones built under
    :func:`salted_seeds`. Any case given to an answer's process is a copy made here; the salt
    itself never leaves this process."""
    from .core import Exercise

    if not isinstance(exercise, Exercise):
        raise TypeError(f"exercise must be an Exercise (e.g. exercise_of('lesson02', 'check_softmax_rows')), "
                        f"got {type(exercise).__name__}")
    if salt is None:
        return exercise.cases()
    with salted_seeds(salt):
        return list(exercise.make_cases())


def unseen_cases(exercise: Any, salt: int) -> list[Any]:
    """The exercise's test cases built under :func:`salted_seeds` (``salt`` is required here: None
    would give the seen cases, whose outputs ship with the package)."""
    if salt is None:
        raise TypeError("salt: expected an int (a lesson's salt from the grader's secrets), got None; "
                        "cases_of(exercise) gives the seen cases")
    return cases_of(exercise, salt)


def _solutions_folder(solutions_dir: Any) -> Path:
    """``solutions_dir`` as an absolute Path: a folder named ``solutions`` (it is imported as the
    package ``solutions`` from its parent); else an error naming it."""
    check_path(solutions_dir, "solutions_dir", "the instructor's solutions/ folder")
    folder = Path(solutions_dir).resolve()
    if not folder.is_dir():
        raise ValueError(f"solutions_dir: expected the instructor's solutions/ folder, but "
                         f"{shown(str(solutions_dir), 100)} "
                         + ("is not a folder" if folder.exists() else "does not exist"))
    if folder.name != "solutions" or not (folder / "__init__.py").is_file():
        raise ValueError(f"solutions_dir: expected the clone's solutions/ package (a folder named "
                         f"'solutions' with an __init__.py), got {shown(str(solutions_dir), 100)}")
    return folder


def _lesson_module(lesson: Any) -> Any:
    """The module course_utils.exercises.<lesson>; a ValueError naming ``lesson`` when there is none."""
    return importlib.import_module(f"course_utils.exercises.{lesson_name(lesson)}")


def _named_check(lesson: Any, check: Any) -> tuple[str, str, Callable[..., Any]]:
    """``(lesson, check, the check function)`` with ``lesson`` and ``check`` as the plain strs they
    hold (:func:`.answers.lesson_name`, :func:`plain_str`: a str subclass's own ``__str__``,
    ``__repr__`` or ``startswith`` is never called, and the f-strings of the grader's messages
    and keys print the text); else a ValueError naming the argument."""
    lesson = lesson_name(lesson)
    module = _lesson_module(lesson)
    if isinstance(check, str):
        check = plain_str(check, "check")
    fn = getattr(module, check, None) if isinstance(check, str) and check.startswith("check_") else None
    if not callable(fn):
        known = sorted(n for n in vars(module) if n.startswith("check_"))
        raise ValueError(f"check must be one of {lesson}'s checks {known}, got {shown(check)}")
    return lesson, check, fn


def exercise_of(lesson: str, check: str) -> Any:
    """The Exercise behind ``lessonNN.check_xxx`` (a bound check, or a wrapper such as 5.3's)."""
    from .core import Exercise

    lesson, check, fn = _named_check(lesson, check)
    module = _lesson_module(lesson)
    found = getattr(fn, "__self__", None)
    if isinstance(found, Exercise):
        return found
    named = check.removeprefix("check_").upper()
    for value in vars(module).values():
        if isinstance(value, Exercise) and value._store_key() and value._store_key()[1].endswith(named):
            return value
    raise LookupError(f"{lesson}.{check}: no exercise found for this check")


_REFERENCES: dict[tuple[str, int, str], dict[str, list]] = {}  # one reference run per lesson


def reference_outputs(solutions_dir: str, lesson: str, salt: int, timeout: float = 600) -> dict[str, list]:
    """The references' outputs on every exercise of ``lesson`` for the unseen cases of ``salt``
    (exercise name -> outputs), computed in a separate Python process that imports
    ``solutions/`` from the instructor's clone; cached for this grader's run. Raises
    RuntimeError when that process fails."""
    folder = _solutions_folder(solutions_dir)
    lesson = lesson_name(lesson)
    if isinstance(salt, bool) or not isinstance(salt, int):
        raise TypeError(f"salt: expected an int, got {type(salt).__name__} {shown(salt, 60)}")
    if not is_real(timeout) or not 0 < timeout < 86400:
        raise ValueError(f"timeout: expected the seconds the reference run may take, a number in "
                         f"(0, 86400), got {type(timeout).__name__} {shown(timeout, 40)}")
    solutions_dir = str(folder)
    key = (lesson, int(salt), str(solutions_dir))
    if key in _REFERENCES:
        return _REFERENCES[key]
    script = (
        "import sys, torch\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "import solutions\n"
        "solutions.attach()\n"
        "from course_utils.exercises import all_exercises, answers, autograde\n"
        "from course_utils.exercises.core import _call\n"
        "salt, lesson, out = int(sys.argv[3]), sys.argv[4], {}\n"
        "for name, ex in all_exercises().items():\n"
        "    if name.startswith(lesson + '.'):\n"
        "        cases = autograde.cases_of(ex, salt)\n"
        "        out[name.split('.')[1]] = [answers.encode(_call(ex.reference, c)) for c in cases]\n"
        "torch.save(out, sys.argv[1])\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "expected.pt"
        try:
            done = subprocess.run([sys.executable, "-I", "-c", script, str(out), str(folder.parent),
                                   str(int(salt)), lesson], capture_output=True, text=True, timeout=timeout,
                                  cwd=tmp)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the reference outputs for the unseen cases of {lesson} took longer than "
                               f"timeout={timeout} s") from None
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the reference outputs for the unseen cases could not be computed:\n"
                               f"{done.stderr[-2000:]}")
        from .answers import decode

        _REFERENCES[key] = {name: [decode(v) for v in values]
                            for name, values in torch.load(out, weights_only=True).items()}
    return _REFERENCES[key]


# -- replaying an answer's recorded outcomes through the exercise's own check ---------------------
def _same_inputs(a: Any, b: Any) -> bool:
    """True when ``b`` is a copy of the case input ``a`` made in this process (``Case.fresh``):
    the same bytes for tensors and arrays, the same parameters for a torch module, the same
    table for pandas, equal plain values, the very object otherwise (a case
    builder's closure). Used to find which recorded outcome a call asks for, not to grade."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and bool(torch.equal(a.nan_to_num(), b.nan_to_num())))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same_inputs(x, y) for x, y in zip(a, b, strict=True)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_inputs(a[k], b[k]) for k in a)
    if isinstance(a, (int, float, str, bool, type(None))):
        return type(a) is type(b) and a == b
    if isinstance(a, torch.nn.Module) or _cases._is_pandas(a):  # Case.fresh copies these too
        from .core import _same_module, _same_table

        if isinstance(a, torch.nn.Module):
            return isinstance(b, torch.nn.Module) and _same_module(a, b)
        return _same_table(a, b)
    return a is b


def _exception(kind: str, message: str) -> BaseException:
    found = getattr(builtins, kind, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        try:
            return found(message) if message else found()
        except Exception:  # noqa: BLE001 - an exception type with other arguments
            pass
    return type(kind if kind.isidentifier() else "Error", (Exception,), {})(message)


def replay(name: str, cases: Sequence[Any], outcomes: Sequence[sandbox.Outcome]) -> Callable[..., Any]:
    """A function that gives, for each of ``cases``, what the answer's process recorded: a copy of
    the output, the exception it raised, the edits it made to its inputs. No student code runs:
    the exercise's check can then grade the answer here, unchanged."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected the answer function's name (a str), got {type(name).__name__}")
    cases = _cases.listed(cases, "cases", "a list of exercise cases (Case)")
    outcomes = _cases.listed(outcomes, "outcomes", "a list of sandbox.Outcome")
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Sequence) \
            or not all(isinstance(c, _cases.Case) for c in cases):
        raise TypeError(f"cases: expected a list of exercise cases (Case), got {shown(cases, 80)}")
    if isinstance(outcomes, (str, bytes)) or not isinstance(outcomes, Sequence) \
            or not all(isinstance(o, sandbox.Outcome) for o in outcomes):
        raise TypeError(f"outcomes: expected a list of sandbox.Outcome, got {shown(outcomes, 80)}")
    if len(cases) != len(outcomes):
        raise ValueError(f"outcomes: expected one recorded outcome per case, {len(cases)}, "
                         f"got {len(outcomes)}")
    table = [((c.args, c.kwargs), o) for c, o in zip(cases, outcomes, strict=True)]

    def answer(*args: Any, **kwargs: Any) -> Any:
        outcome = next((o for inputs, o in table if _same_inputs(inputs, (args, kwargs))), None)
        if outcome is None:
            raise LookupError("the grader has no recorded output for these inputs")
        for given, after in zip((*args, *kwargs.values()), outcome.inputs_after, strict=False):
            with contextlib.suppress(Exception):  # an input the answer changed in place
                if isinstance(given, torch.Tensor) and isinstance(after, torch.Tensor):
                    given.copy_(after)
                elif isinstance(given, np.ndarray) and isinstance(after, np.ndarray):
                    given[...] = after
                elif isinstance(given, list) and isinstance(after, list):
                    given[:] = after  # a list the answer grew, shrank or refilled
        if outcome.kind == "raised" and outcome.stub:
            raise NotImplementedError()
        if outcome.kind == "raised":
            raise _exception(*outcome.error)
        if outcome.kind != "value":
            raise _exception("RuntimeError", outcome.error[1])
        return _copy(outcome.value)

    answer.__code__ = answer.__code__.replace(co_name=name if name.isidentifier() else "answer")
    answer.__name__ = answer.__code__.co_name
    return answer


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


@contextlib.contextmanager
def _these_cases(exercise: Any, cases: list[Any], expected: list[Any] | None) -> Iterator[None]:
    """While active, ``exercise`` builds ``cases`` (the very objects the answer's process was given)
    and, with ``expected``, compares with those outputs (no stored slips: unseen cases)."""
    from .core import _grading

    saved = {k: exercise.__dict__[k] for k in ("make_cases", "_expected", "_cases") if k in exercise.__dict__}
    exercise._store_key()  # remembered before the cases change
    _grading(exercise.__dict__, True)  # (the check keeps them: not a cell's)
    exercise.__dict__["make_cases"] = lambda: list(cases)
    exercise.__dict__["_cases"] = list(cases)
    if expected is not None:
        exercise.__dict__["_expected"] = expected
    try:
        yield
    finally:
        for k in ("make_cases", "_expected", "_cases"):
            exercise.__dict__.pop(k, None)
        exercise.__dict__.update(saved)
        _grading(exercise.__dict__, False)


def feedback_from(lesson: str, check: str, name: str, run: sandbox.Run, cases: list[Any],
                  unseen: list[Any] | None = None, expected_unseen: list[Any] | None = None) -> Any:
    """The Feedback of the answer whose recorded outcomes are ``run`` (case set 0: ``cases``, the
    exercise's own; 1: ``unseen``, compared with ``expected_unseen``). Correct only when both are."""
    from .core import Feedback

    lesson, check, _ = _named_check(lesson, check)
    exercise = exercise_of(lesson, check)
    title = exercise.title
    if not isinstance(run, sandbox.Run):
        raise TypeError(f"run must be the answer's recorded run (a sandbox.Run from run_answer), got "
                        f"{type(run).__name__} {shown(run, 60)}")
    if run.lost is not None:
        return Feedback(title, "error", f"the grader could not run your function: {run.lost}.", exercise.hint)
    if run.defined is not None:
        kind, message = run.defined
        return Feedback(title, "error", f"defining your function (and what it imports) raised {kind}: "
                        f"{message}", "the answer's cell must run on its own, after its imports.")
    sets = [(cases, None)] + ([(unseen, expected_unseen)] if unseen is not None else [])
    for index, ((set_cases, expected), outcomes) in enumerate(zip(sets, run.outcomes, strict=True)):
        for outcome in outcomes:
            if outcome.used is not None:
                return exercise._used_reference(outcome.used)
            if outcome.tampered is not None:
                return exercise._tampered(outcome.tampered)
        for case, outcome in zip(set_cases, outcomes, strict=True):
            if outcome.kind == "refused":
                where = f" on {case.label}" if case.label and index == 0 else ""  # unseen: not named
                return Feedback(title, "wrong", f"the grader refused what your function returned{where}: "
                                f"{outcome.error[1]}.", exercise.hint)
            if outcome.kind == "lost":
                return Feedback(title, "error", f"the grader got no output of your function "
                                f"({outcome.error[1]}).", exercise.hint)
        fn = replay(name, set_cases, outcomes)
        check_fn = getattr(importlib.import_module(f"course_utils.exercises.{lesson}"), check)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _these_cases(exercise, set_cases, expected):
                feedback = check_fn(fn)
        if not feedback.passed:
            if index == 0:
                return feedback
            # Nothing of the unseen case itself (its label, inputs, expected output or what the
            # answer raised on it): shown, it could be looked up at the next grading under the
            # same salt (cold trial C15).
            return Feedback(title, feedback.status, "wrong on test cases your notebook has not seen "
                            "(their inputs and outputs are not shown): the answer is right only on the "
                            "cases it was tried on; check it on other shapes and values.",
                            exercise.hint, mistake=feedback.mistake)
    n = len(cases) + len(unseen or [])
    return Feedback(title, "correct", f"correct on all {n} test cases, {len(unseen or [])} of them unseen.")


def _plain_bytes(value: Any, depth: int = 0) -> int:
    """About how many bytes ``value`` (an output or input) takes in the answer's result file."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size() + 64
    if isinstance(value, np.ndarray):
        return value.nbytes + 64
    if isinstance(value, str):
        return len(value) + 16
    if depth < 10 and isinstance(value, (tuple, list)):
        return sum(_plain_bytes(v, depth + 1) for v in value) + 16
    if depth < 10 and isinstance(value, dict):
        return sum(_plain_bytes(k, depth + 1) + _plain_bytes(v, depth + 1) for k, v in value.items()) + 16
    return 16


def result_cap(exercise: Any, cases: list[Any], unseen: list[Any] | None = None,
               expected_unseen: list[Any] | None = None) -> int | None:
    """The most bytes the grader reads back from an answer's process: 8 times the right outputs
    and the inputs (their copies come back after the call) of every case, and 1 MiB. None (no
    cap) when the exercise's own right outputs cannot be had here. ``unseen`` and
    ``expected_unseen`` (their right outputs, one per case) come together or not at all."""
    from .core import Exercise

    if not isinstance(exercise, Exercise):
        raise TypeError(f"exercise: expected an Exercise (see exercise_of), got {type(exercise).__name__} "
                        f"{shown(exercise, 60)}")
    cases = _cases.listed(cases, "cases", "a list of the exercise's cases (Case)")
    unseen = _cases.listed(unseen, "unseen", "a list of the exercise's unseen cases (Case) or None")
    expected_unseen = _cases.listed(expected_unseen, "expected_unseen",
                                    "the right outputs of the unseen cases (a list, one per case) or None")
    for label, given in (("cases", cases), ("unseen", unseen)):
        if given is None and label == "unseen":
            continue
        if not isinstance(given, (list, tuple)) or not all(isinstance(c, _cases.Case) for c in given):
            raise TypeError(f"{label}: expected a list of the exercise's cases (Case), got "
                            f"{shown(given, 80)}")
    if expected_unseen is not None:  # was ignored when junk: the cap then left out the unseen outputs
        if not isinstance(expected_unseen, (list, tuple)):
            raise TypeError(f"expected_unseen: expected the right outputs of the unseen cases (a list, "
                            f"one per case) or None, got {type(expected_unseen).__name__} "
                            f"{shown(expected_unseen, 60)}")
        if len(expected_unseen) != len(unseen or []):
            raise ValueError(f"expected_unseen: expected one right output per unseen case "
                             f"({len(unseen or [])}), got {len(expected_unseen)}")
    try:
        expected = exercise._expected_outputs(cases)
    except Exception:  # noqa: BLE001 - no stored outputs: grade without a cap
        return None
    total = _plain_bytes(expected) + _plain_bytes(expected_unseen or [])
    for case in [*cases, *(unseen or [])]:
        total += _plain_bytes(list(case.args)) + _plain_bytes(dict(case.kwargs))
    return 8 * total + 2**20


def _check_per_call(per_call: Any) -> None:
    if not is_real(per_call) or not 0 < per_call < 86400:
        raise ValueError(f"per_call must be the seconds one call of the answer may take, a number in "
                         f"(0, 86400), got {type(per_call).__name__} {shown(per_call)}")


def grade_answer(lesson: str, check: str, code: str, name: str, *, salt: int | None,
                 solutions_dir: str | None, hide: Sequence[Path] = (), per_call: int = 60,
                 memory: int = 4 * 2**30, sandboxed: bool | None = None) -> Any:
    """Grade the answer ``name`` whose source is ``code`` (:func:`.sandbox.answer_source`) with
    ``lessonNN.check_xxx``: run apart, compared here. With ``salt`` and ``solutions_dir``
    also on unseen cases (both or neither). Returns the Feedback."""
    from .core import Feedback

    lesson, check, _ = _named_check(lesson, check)
    exercise = exercise_of(lesson, check)
    _check_per_call(per_call)
    _check_grading_arguments(code, name, salt, solutions_dir, hide, sandboxed)
    code, name = plain_str(code, "code"), plain_str(name, "name")  # (checked: the plain strs they hold)
    if sandbox.is_stub(code, name):  # the release's stub: the check's own words, no process needed
        def stub(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError()

        return getattr(importlib.import_module(f"course_utils.exercises.{lesson}"), check)(stub)
    broken = sandbox.rules_broken(code, f"{lesson}.{check}")
    if broken:
        return Feedback(exercise.title, "mistake",
                        "your answer's code uses " + ", ".join(broken) + ": the grader does not run "
                        "answers that reach code by a computed name, the interpreter's internals, other "
                        "modules' private functions, files, a module outside the maths libraries, or a "
                        "ready-made twin of the exercise, or that change a module's attributes.",
                        "write the computation itself with the operations the exercise allows.",
                        mistake="called_reference")
    cases = cases_of(exercise)
    sets = [cases]
    unseen = expected = None
    if salt is not None and solutions_dir is not None:
        exercise_name = exercise._store_key()[1]
        expected = reference_outputs(solutions_dir, lesson, salt)[exercise_name]
        unseen = cases_of(exercise, salt)
        sets.append(unseen)
    run = sandbox.run_answer(code, name, f"{lesson}.{check}", sets, hide=hide, per_call=per_call,
                             memory=memory, sandbox=sandboxed,
                             max_result_bytes=result_cap(exercise, cases, unseen, expected))
    return feedback_from(lesson, check, name, run, cases, unseen, expected)


def _check_salt_and_solutions(salt: object, solutions_dir: object) -> None:
    """``salt`` and ``solutions_dir`` (the unseen cases) come together or not at all: one alone
    would be ignored without a word."""
    if salt is not None and (isinstance(salt, bool) or not isinstance(salt, int)):
        raise TypeError(f"salt must be an int or None, got {shown(salt, 60)}")
    if salt is not None and salt < 0:  # (salted_seeds's rule, checked before the reference runs)
        raise ValueError(f"salt must be an int >= 0 (a lesson's salt from the grader's secrets) or "
                         f"None, got {salt}")
    if solutions_dir is not None:  # str() of anything was read as a folder's name (or raised)
        check_path(solutions_dir, "solutions_dir", "the instructor's solutions folder, or None")
    if solutions_dir is not None and not Path(solutions_dir).is_dir():
        raise ValueError(f"solutions_dir must be the instructor's solutions folder or None, but "
                         f"{shown(solutions_dir, 100)} is not a folder")
    if (salt is None) != (solutions_dir is None):  # the unseen cases need both: one alone was ignored
        given, lacking = ("salt", "solutions_dir") if solutions_dir is None else ("solutions_dir", "salt")
        raise ValueError(f"salt and solutions_dir go together (the unseen cases need both), got {given}="
                         f"{shown(salt if given == 'salt' else solutions_dir, 100)} and {lacking}=None")


def _check_grading_arguments(code: object, name: object, salt: object, solutions_dir: object,
                             hide: object, sandboxed: object) -> None:
    """A TypeError or ValueError naming the first argument of :func:`grade_answer` that cannot
    be what it says (the grader's own callers pass them; a wrong one is a bug there)."""
    if not isinstance(code, str):
        raise TypeError(f"code must be the answer's source text (a str), got {type(code).__name__}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be the answer function's name (an identifier), got {shown(name, 60)}")
    _check_salt_and_solutions(salt, solutions_dir)
    hide = _cases.listed(hide, "hide", "a list of folders")
    if isinstance(hide, (str, bytes)) or not isinstance(hide, (list, tuple)) \
            or not all(isinstance(p, Path) for p in hide):
        raise TypeError(f"hide must be a list of pathlib.Path to hide from the answer, got {shown(hide, 80)}")
    if sandboxed is not None and not isinstance(sandboxed, bool):
        raise TypeError(f"sandboxed must be True, False or None (choose by platform), got "
                        f"{shown(sandboxed, 60)}")


# -- nbgrader: the preprocessor that takes Execute's place --------------------------------------
_check_call = sandbox.check_call  # a test cell's check call, or None


def _nbgrader_meta(cell: Any) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _need_notebook(nb: Any) -> None:
    """``nb`` must be a notebook read by nbformat (cells reachable as ``nb.cells``)."""
    if not isinstance(nb, dict) or not isinstance(getattr(nb, "cells", None), list):
        raise TypeError(f"nb: expected a notebook read by nbformat.read (a NotebookNode with .cells), got "
                        f"{type(nb).__name__} {shown(nb, 60)}")
    for i, cell in enumerate(nb.cells):  # a student can edit a cell's metadata: refuse, never guess
        metadata = cell.get("metadata", {}) if isinstance(cell, dict) else {}
        where, got = ("metadata", metadata) if not isinstance(metadata, dict) else \
            ("metadata['nbgrader']", metadata.get("nbgrader", {}))
        if not isinstance(got, dict):
            raise ValueError(f"nb: cells[{i}].{where} is {type(got).__name__} {shown(got, 60)}, expected a "
                             f"dict "
                             "(as nbgrader writes it); the notebook was edited: put the released cell back "
                             "before grading")


def neutralise_html(nb: Any) -> int:
    """Escape the HTML of every markdown or raw cell of ``nb`` that the student could write (all
    but the locked cells nbgrader has put back from the source), so that the Formgrader shows it
    as text: nbgrader renders markdown unsanitised, and a student's ``<img onerror=...>`` ran as
    the instructor and rewrote every classmate's grade (cold trial C16). Returns how many cells
    changed."""
    import html

    _need_notebook(nb)
    for i, cell in enumerate(nb.cells):  # all checked before any cell changes
        if not isinstance(cell, dict) or not isinstance(cell.get("source"), str):
            got = cell.get("source") if isinstance(cell, dict) else cell
            raise TypeError(f"nb: expected every cell's source as one str (as nbformat.read gives it), "
                            f"but nb.cells[{i}]{'.source' if isinstance(cell, dict) else ''} is "
                            f"{type(got).__name__} {shown(got, 60)}")
    changed = 0
    for cell in nb.cells:
        if cell.cell_type not in ("markdown", "raw") or _nbgrader_meta(cell).get("locked"):
            continue
        escaped = html.escape(cell.source, quote=False)
        if cell.cell_type == "raw":  # a raw cell marked text/html is inserted as it is
            cell.metadata.pop("format", None)
            cell.metadata.pop("raw_mimetype", None)
        if escaped != cell.source:
            cell.source = escaped
            changed += 1
    return changed


def _checks_its_own_exercise(grade_id: str, call: Any) -> bool:
    """Whether a test cell's check call is the one its ``grade_id`` was released with:
    ``lessonNN.check_xxx`` grades ``lessonNN_xxx_test`` (``nbgrader_tools.convert``: a repeated id
    gets ``_2``, ``_3``... before or after ``_test``). A call of another exercise's check would give
    this grade_id that exercise's points."""
    base = re.escape(f"{call['module']}_{call['check'].removeprefix('check_')}")
    return re.fullmatch(rf"{base}(_\d+)?_test(_\d+)?", grade_id) is not None


def _unique_grade_ids(nb: Any) -> None:
    """A ValueError naming a grade_id that two cells of ``nb`` carry: the released notebook's are
    unique (nbgrader refuses such a notebook too), and grading both would let one cell's verdict
    replace the other's without a word."""
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        grade_id = _nbgrader_meta(cell).get("grade_id") if isinstance(cell, dict) else None
        if grade_id is None:
            continue
        if grade_id in seen:
            raise ValueError(f"nb: cells {seen[grade_id]} and {index} both carry grade_id {shown(grade_id)}; "
                             "a notebook's grade_ids are unique (the released notebook's), so this one "
                             "was edited: put the released cells back before grading")
        seen[grade_id] = index


def grade_notebook(nb: Any, *, salt: int | None, solutions_dir: str | None, hide: Sequence[Path] = (),
                   per_call: int = 60, memory: int = 4 * 2**30, sandboxed: bool | None = None,
                   log: Any = None) -> dict[str, Any]:
    """Grade every autograded test cell of ``nb`` (an nbgrader notebook: solution cell
    ``lessonNN_xxx``, test cell ``lessonNN_xxx_test`` whose source calls ``lessonNN.check_xxx(fn)``),
    returning grade_id of the test cell -> Feedback, and set each test cell's outputs to the
    grader's verdict alone; the student's markdown and raw cells keep no live HTML
    (:func:`neutralise_html`). The grade_id says which check grades a test cell: one edited to call
    another exercise's check gets no points, and two cells with one grade_id are a ValueError, as is
    a cell whose metadata or ``metadata['nbgrader']`` is not a dict (a student can edit it: the
    notebook is refused whole rather than a cell guessed to be no nbgrader cell)."""
    import nbformat

    from .core import Feedback

    if not isinstance(nb, nbformat.NotebookNode):
        raise TypeError(f"nb must be a notebook read with nbformat.read(path, as_version=4), "
                        f"got {type(nb).__name__}")
    if not isinstance(nb.get("cells"), list):
        got = "it has no 'cells'" if "cells" not in nb else \
            f"its 'cells' is {type(nb['cells']).__name__} {shown(nb['cells'], 40)}"
        raise TypeError(f"nb must be a notebook read with nbformat.read(path, as_version=4), with a "
                        f"list of cells, but {got}")
    _check_per_call(per_call)
    _check_salt_and_solutions(salt, solutions_dir)  # before any cell is graded
    _need_notebook(nb)  # every cell's nbgrader metadata a dict
    _unique_grade_ids(nb)
    neutralise_html(nb)
    results: dict[str, Any] = {}
    ids = {_nbgrader_meta(c).get("grade_id"): i for i, c in enumerate(nb.cells) if _nbgrader_meta(c)}
    for index, cell in enumerate(nb.cells):
        meta = _nbgrader_meta(cell)
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        grade_id = meta.get("grade_id", "")
        call = _check_call(cell.source)
        if call is None:
            feedback = Feedback(grade_id, "error", "this test cell is not a course check; it gets no points.")
        elif not _checks_its_own_exercise(grade_id, call):
            feedback = Feedback(grade_id, "error",
                                f"this test cell calls {call['module']}.{call['check']}, which is not the "
                                f"check of {grade_id} (the test cells are locked: an edited one gets no "
                                "points). Put the released test cell back.")
        else:
            before = [c for c in nb.cells[:index] if c.cell_type == "code"]
            answer_index = ids.get(grade_id.removesuffix("_test"))
            answer_cell = next((i for i, c in enumerate(before) if answer_index is not None
                                and c is nb.cells[answer_index]), None)
            try:
                code = sandbox.answer_source([c.source for c in before], call["arg"], answer_cell)
            except (sandbox.AnswerProblem, ValueError) as exc:  # (ValueError: an edited test cell's
                # `check_x(1)`, a name no function can have)
                title = exercise_of(call["module"], call["check"]).title
                feedback = Feedback(title, "not attempted" if "no function" in str(exc) else "error",
                                    f"{exc}.", "")
            else:
                feedback = grade_answer(call["module"], call["check"], code, call["arg"], salt=salt,
                                        solutions_dir=solutions_dir, hide=hide, per_call=per_call,
                                        memory=memory, sandboxed=sandboxed)
        results[grade_id] = feedback
        text = f"Graded outside the notebook:\n{feedback}\n"
        if feedback.passed:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        else:
            cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue=text.strip(),
                                                   traceback=[text.strip()])]
        cell.execution_count = None
        if log is not None:
            log.info("%s: %s", grade_id, str(feedback).splitlines()[0])
    return results


def _preprocessor_class() -> type:
    from nbconvert.preprocessors import Preprocessor
    from traitlets import Bool, Float, Integer, Unicode

    class GradeOutside(Preprocessor):
        """nbgrader autograde step: grade each test cell outside the notebook (module docstring)."""

        course_root = Unicode("", help="the nbgrader course folder (holds .course_grader.json)"
                              ).tag(config=True)
        per_call = Integer(60, help="seconds one call of an answer may take").tag(config=True)
        memory_gib = Float(4.0, help="memory limit of an answer's process, GiB").tag(config=True)
        require_sandbox = Bool(False, help="refuse to grade where bubblewrap is missing").tag(config=True)
        enabled = Bool(True, help="always on: without it every test cell would keep no output, and "
                       "nbgrader gives full points to a test cell without an error").tag(config=True)

        def __call__(self, nb: Any, resources: dict) -> tuple[Any, dict]:
            return self.preprocess(nb, resources)  # whatever `enabled` says (fail closed)

        def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
            course = Path(self.course_root or os.getcwd()).resolve()
            secrets = read_secrets(course)
            if secrets.get("manifest") != manifest():
                raise RuntimeError(
                    "the installed checks (course_utils/exercises) differ from the ones this release was "
                    "made with; autograde with the course_utils of that release, or run "
                    "`nbgrader_tools.py source` and `generate_assignment` again.")
            notebook = resources["nbgrader"]["notebook"]
            salt = secrets.get("salts", {}).get(notebook)
            if salt is None:
                raise RuntimeError(f"no salt for notebook {shown(notebook)} in {course / SECRETS_NAME}: run "
                                   "`nbgrader_tools.py source` for this course again")
            isolated = sandbox.isolation() == "bubblewrap"
            if not isolated:
                if self.require_sandbox:
                    raise RuntimeError("GradeOutside.require_sandbox is set and bubblewrap cannot run here")
                self.log.warning(sandbox.WARNING)
                print(sandbox.WARNING, file=sys.stderr)
            clone = Path(secrets["solutions_dir"]).parent  # hidden even when the package is installed
            grade_notebook(nb, salt=int(salt), solutions_dir=secrets["solutions_dir"], hide=[course, clone],
                           per_call=self.per_call, memory=int(self.memory_gib * 2**30), log=self.log)
            return nb, resources

    return GradeOutside


# -- nbgrader: the autograded notebook made inert before the formgrader shows it --------------
# The formgrader renders the autograded notebook as HTML with no sanitising (markdown through
# markdown2html, raw cells as they are, outputs by their richest type), in the instructor's browser,
# where a script can PUT any grade. So every student-written part is shown as plain text.
_KEPT_NOTEBOOK_METADATA = ("kernelspec", "language_info")
_TEXT_OUTPUTS = ("stream", "error")


def _as_text_block(source: str) -> str:
    """``source`` as a markdown indented code block: every line indented four spaces, so markdown
    shows it verbatim, HTML-escaped, with no link, image, tag or math of its own."""
    return "\n".join("    " + line for line in source.replace("\r", "").split("\n"))


def make_inert(nb: Any) -> Any:
    """Make ``nb`` (an autograded notebook, graded already) safe to render in a browser: markdown
    and raw cells become plain-text blocks with no attachments; a code cell keeps its source (which
    the exporter highlights, escaped) and, for the grader's own test cells only, the verdict's text
    outputs; every other output, all cell metadata but nbgrader's, and notebook metadata but the
    kernel's and nbgrader's, are dropped. Returns ``nb``, changed in place."""
    _need_notebook(nb)
    for cell in nb.cells:
        nbgrader_meta = _nbgrader_meta(cell)
        cell.metadata = {"nbgrader": nbgrader_meta} if nbgrader_meta else {}
        if cell.cell_type == "code":
            verdict = bool(nbgrader_meta.get("grade")) and not nbgrader_meta.get("solution")
            cell.outputs = [o for o in cell.get("outputs", [])
                            if verdict and o.get("output_type") in _TEXT_OUTPUTS]
            for output in cell.outputs:
                output.pop("metadata", None)
            cell.execution_count = None
        else:
            cell.cell_type = "markdown"
            # undo neutralise_html's escaping: the code block escapes it once, as it is shown
            cell.source = _as_text_block(html.unescape(cell.source))
            cell.pop("attachments", None)
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in _KEPT_NOTEBOOK_METADATA + ("nbgrader",)}
    return nb


def _inert_class() -> type:
    from nbconvert.preprocessors import Preprocessor

    class MakeInert(Preprocessor):
        """nbgrader autograde step, the last: the written notebook carries no HTML, script or rich
        output of the student's (see :func:`make_inert`); grades were saved before it."""

        def __call__(self, nb: Any, resources: dict) -> tuple[Any, dict]:
            return self.preprocess(nb, resources)  # always on, whatever `enabled` says

        def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
            return make_inert(nb), resources

    return MakeInert


def _deduplicate_class() -> type:
    from nbgrader.preprocessors import DeduplicateIds

    class KeepLastOfDuplicateIds(DeduplicateIds):
        """nbgrader autograde sanitising step in place of ``DeduplicateIds``: of cells that carry one
        grade_id (a cell copied and pasted in JupyterLab), the last keeps it and each earlier copy
        becomes a plain cell, its nbgrader metadata removed. nbgrader's own sets that metadata to
        ``{}``, which its ``CheckCellMetadata`` then takes for an old metadata format, and that
        error stopped ``nbgrader autograde`` for every later submission, with a message about
        ``nbgrader update``. The submission is graded on its own merits: the last definition is
        the one its later cells use."""

        def preprocess_cell(self, cell: Any, resources: Any, cell_index: int) -> tuple[Any, Any]:
            meta = _nbgrader_meta(cell)
            if not (meta.get("grade") or meta.get("solution") or meta.get("locked")):
                return cell, resources
            grade_id = meta.get("grade_id")
            if grade_id in self.grade_ids:
                self.log.warning("grade_id %s is on more than one cell (a cell copied and pasted?): the "
                                 "last one is graded, an earlier copy is read as plain code", shown(grade_id))
                del cell.metadata["nbgrader"]
            else:
                self.grade_ids.add(grade_id)
            return cell, resources

    return KeepLastOfDuplicateIds


def __getattr__(name: str) -> Any:  # the preprocessor classes, made on first use (nbconvert is heavy)
    makers = {"GradeOutside": _preprocessor_class, "MakeInert": _inert_class,
              "KeepLastOfDuplicateIds": _deduplicate_class}
    if name in makers:
        cls = makers[name]()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def _check_config(c: object) -> None:
    """``c`` is nbgrader's config: a dict whose attributes are its sections (``c.Autograde``), as
    traitlets' ``Config`` makes them on first use; else a TypeError naming ``c``."""
    try:
        sections = isinstance(c, dict) and isinstance(c.GradeOutside, dict)
    except AttributeError:
        sections = False
    if not sections:
        plain = " (a plain dict has no sections as attributes)" if isinstance(c, dict) else ""
        raise TypeError(f"c: expected nbgrader's config object (c = get_config() in nbgrader_config.py, a "
                        f"traitlets Config){plain}, got {type(c).__name__} {shown(c, 60)}")


def configure(c: Any, course_root: str | Path) -> None:
    """Set nbgrader's config ``c`` (in nbgrader_config.py) so that ``nbgrader autograde`` grades
    outside the notebook: :class:`GradeOutside` in place of ``Execute``, the rest as nbgrader has it.
    ``c`` is a traitlets ``Config`` (or a dict like it, whose attributes are its sections); a plain
    dict is refused naming ``c`` (it failed later with "'dict' object has no attribute 'Autograde'").
    ``course_root`` must be an existing folder, else a FileNotFoundError (missing) or a
    NotADirectoryError naming it (a missing one was kept without a word and failed only at
    autograde, battery 18)."""
    check_path(course_root, "course_root", "the course folder (the path of nbgrader's course)")
    if not Path(course_root).is_dir():
        kind = path_kind(course_root) or "a file"
        raise (FileNotFoundError if kind == "missing" else NotADirectoryError)(
            f"course_root: expected the course folder nbgrader works in (an existing folder), got "
            f"{shown(os.fspath(course_root))}, which is {kind}; nbgrader autograde would fail on it later")
    _check_config(c)
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        ClearOutput,
        IgnorePattern,
        LimitOutput,
        OverwriteCells,
        OverwriteKernelspec,
        SaveAutoGrades,
    )

    # nbgrader's own, but duplicated grade_ids (a pasted cell) graded, not a stop for the whole class
    c.Autograde.sanitize_preprocessors = [ClearOutput, __getattr__("KeepLastOfDuplicateIds"),
                                          OverwriteKernelspec, OverwriteCells, CheckCellMetadata]
    c.Autograde.autograde_preprocessors = [
        __getattr__("GradeOutside"), IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
        AssignLatePenalties, CheckCellMetadata, __getattr__("MakeInert")]
    c.GradeOutside.course_root = str(Path(course_root).resolve())
