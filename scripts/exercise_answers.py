#!/usr/bin/env python3
"""Build or check the exercises' stored answers (course_utils/exercises/answers/lessonNN.pt).

    python scripts/exercise_answers.py build   # store every check's cases and solutions/' outputs on them
    python scripts/exercise_answers.py check   # exit 1 (naming the exercises) when the store is stale

The checks grade learners' answers against these outputs, so the package ships no
reference solution as code. The cases are stored too, so every machine feeds the same
inputs. Run ``build`` after changing a reference, a mistake or a case builder, and commit
the .pt files with that change. ``check`` compares with tolerances, never by last bits: on
another CPU (MKL's AVX2 or AVX-512 path) the case builders' float maths may differ there.

``build`` writes every store or none (a store that cannot be written leaves all as they were).
Interrupted (Ctrl-C, SIGINT, SIGTERM), it says on one line whether it wrote the stores (all of
them, or none) and exits 130 or 143, up to the moment its work is done. A
signal after that, while the interpreter shuts down (about half a second with torch loaded,
once every store was written and its "wrote" line printed), is ignored and the exit status is 0:
nothing was left undone (course_utils/cli.py, run).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "scripts") not in sys.path:  # for course_cli
    sys.path.append(str(ROOT / "scripts"))
from course_cli import load_cli  # noqa: E402  (course_utils/cli.py, before the slow imports)

cli = load_cli()

if __name__ == "__main__":
    # a signal during the (slow) imports: one line, at once; one without .venv's modules: one line
    cli.stop_at_once("exercise_answers.py", needs=("nbformat", "torch"))

import io  # noqa: E402

import notebook_tools  # noqa: E402  (scripts/: the one atomic writer)
import torch  # noqa: E402

from course_utils.exercises import all_exercises, answers  # noqa: E402
from course_utils.exercises.core import _call, outcome, outputs_close  # noqa: E402


def _entry(exercise, cases: list) -> dict:
    """What the store holds for ``exercise`` when its cases are ``cases``."""
    stored_cases = [answers.encode_case(c) for c in cases]
    return {"cases": None if any(c is None for c in stored_cases) else stored_cases,
            "signature": answers.cases_signature(cases),
            "expected": [answers.encode(_call(exercise.reference, c)) for c in cases],
            "mistakes": {m.key: [answers.encode(outcome(m.implementation, c)) for c in cases]
                         for m in exercise.mistakes}}


def compute(kept: dict[str, dict] | None = None) -> dict[str, dict]:
    """lesson -> the data its .pt file holds, computed from solutions/: on freshly built cases,
    or, for an exercise whose cases ``kept`` (lesson -> stored exercises) holds, on those."""
    import solutions

    solutions.attach()
    torch.manual_seed(0)
    by_lesson: dict[str, dict] = {}
    for full_name, exercise in sorted(all_exercises().items()):
        lesson, name = full_name.split(".")
        old = (kept or {}).get(lesson, {}).get(name)
        if old is not None and old.get("cases") is not None:
            cases = [answers.decode_case(c) for c in old["cases"]]
        else:
            cases = list(exercise.make_cases())
        by_lesson.setdefault(lesson, {"format": answers.FORMAT, "exercises": {}})["exercises"][name] = \
            _entry(exercise, cases)
    return by_lesson


def _write_all(stores: dict[Path, dict], written: str | None = None) -> None:
    """Save each ``path -> data`` (torch.save), all or nothing, through the scripts' one
    all-or-nothing writer (:func:`notebook_tools.write_all_atomically`: no temporary left whenever
    a signal lands, a signal a library swallowed still stops it before the first rename, and a
    store that cannot be written puts every other one back: lesson01.pt and lesson02.pt were
    rewritten before lesson03.pt failed, battery 21); a store that cannot be written is its
    ToolError naming it. ``written`` is what an interruption once all are in place reports."""
    contents = {}
    for path, data in stores.items():
        buffer = io.BytesIO()
        torch.save(data, buffer)
        contents[path] = buffer.getvalue()
    for path in stores:
        path.parent.mkdir(parents=True, exist_ok=True)
    notebook_tools.write_all_atomically(contents, written)


def _saved() -> tuple[dict[str, dict], list[str]]:
    """The store's exercises by lesson, and the problems met reading it."""
    saved, problems = {}, []
    for lesson in sorted({key.split(".")[0] for key in all_exercises()}):
        path = answers.ANSWERS_DIR / f"{lesson}.pt"
        try:
            saved[lesson] = answers.read_store(path)["exercises"]
        except (OSError, ValueError) as exc:
            problems.append(str(exc))
    return saved, problems


def stale() -> list[str]:
    """Exercises whose stored answers differ from what solutions/ computes now.

    The stored cases must match freshly built ones in shape and number and, to 1e-5, in value;
    solutions/ then runs on the *stored* cases, and its outputs must match the stored ones
    within the check's own tolerance. Nothing is compared by its last bits, so the check
    passes on any CPU path (MKL_CBWR, ATEN_CPU_CAPABILITY) the store was not built on."""
    saved, problems = _saved()
    exercises = all_exercises()
    for lesson, data in compute(saved).items():
        if lesson not in saved:
            continue
        for name, entry in data["exercises"].items():
            old = saved[lesson].get(name)
            fresh_cases = list(exercises[f"{lesson}.{name}"].make_cases())
            fresh_entry = {"cases": [answers.encode_case(c) for c in fresh_cases],
                           "signature": answers.cases_signature(fresh_cases)}
            if any(c is None for c in fresh_entry["cases"]):
                fresh_entry["cases"] = None
            if (old is None or old.get("signature") != fresh_entry["signature"]
                    or not _same_cases(old, fresh_entry)):
                problems.append(f"{lesson}.{name}: test inputs changed")
                continue
            exercise = exercises[f"{lesson}.{name}"]
            tol = {"rtol": exercise.rtol, "atol": exercise.atol}
            fresh = {"expected": [answers.decode(v) for v in entry["expected"]],
                     "mistakes": {k: [answers.decode(v) for v in vs]
                                  for k, vs in entry["mistakes"].items()}}
            kept = {"expected": [answers.decode(v) for v in old["expected"]],
                    "mistakes": {k: [answers.decode(v) for v in vs] for k, vs in old["mistakes"].items()}}
            if not outputs_close(kept["expected"], fresh["expected"], **tol):
                problems.append(f"{lesson}.{name}: reference outputs changed")
            if sorted(kept["mistakes"]) != sorted(fresh["mistakes"]):
                problems.append(f"{lesson}.{name}: the list of mistakes changed")
                continue
            for key, outs in fresh["mistakes"].items():
                if not _same_outcomes(kept["mistakes"][key], outs, **tol):
                    problems.append(f"{lesson}.{name}: mistake {key!r} changed")
        problems += [f"{lesson}.{name}: stored but no longer an exercise" for name in saved[lesson]
                     if name not in data["exercises"]]
    return problems


def _inputs_close(a, b) -> bool:
    """Two test inputs equal up to float rounding (modules by their weights, tables by values)."""
    if isinstance(a, torch.nn.Module) or isinstance(b, torch.nn.Module):
        return (type(a) is type(b) and a.state_dict().keys() == b.state_dict().keys()
                and all(_inputs_close(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict()))
    if hasattr(a, "to_numpy") and hasattr(a, "columns"):  # pandas tables
        return (hasattr(b, "to_numpy") and list(a.index) == list(b.index)
                and list(a.columns) == list(b.columns) and outputs_close(a.to_numpy(), b.to_numpy()))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_inputs_close(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return (isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(_inputs_close(x, y) for x, y in zip(a, b, strict=True)))
    if callable(a):
        return callable(b) and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    return outputs_close(a, b)  # to 1e-5: torch.randn itself differs in the last bits between ATen paths


def _same_cases(old: dict, new: dict) -> bool:
    """The stored cases and freshly built ones hold the same inputs, to float rounding."""
    if (old.get("cases") is None) != (new["cases"] is None):
        return False
    if new["cases"] is None:
        return True  # built at check time: the signature above is all there is to compare
    for x, y in zip(old["cases"], new["cases"], strict=True):
        a, b = answers.decode_case(x), answers.decode_case(y)
        if a.label != b.label or not _inputs_close((a.args, a.kwargs), (b.args, b.kwargs)):
            return False
    return True


def _same_outcomes(a: list, b: list, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, answers.Raised) or isinstance(y, answers.Raised):
            if not (isinstance(x, answers.Raised) and isinstance(y, answers.Raised)
                    and answers.same_raise(x, y.kind, y.message, loose=True)):
                return False
        elif not outputs_close(x, y, rtol=rtol, atol=atol):
            return False
    return True


class SolutionsProblem(Exception):
    """solutions/ cannot be imported or attached: a one-line message names the file."""


def _attached_solutions() -> None:
    """Import solutions/ and attach it, or a :class:`SolutionsProblem` naming the file and line
    (a SyntaxError, an import error or any other error a solutions module raises, a missing
    reference)."""
    try:
        import solutions

        solutions.attach()
    except SyntaxError as exc:
        where = Path(exc.filename or "solutions")
        shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
        raise SolutionsProblem(f"{shown}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}") from None
    except (ImportError, KeyError, AttributeError) as exc:
        raise SolutionsProblem(f"solutions/ cannot be attached ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # noqa: BLE001 - any error a solutions module raises at import
        raise SolutionsProblem(f"{_solutions_line(exc)}: {type(exc).__name__}: {exc}") from None


def _solutions_line(exc: BaseException) -> str:
    """Where in solutions/ ``exc`` was raised: the innermost frame in that folder, as
    ``solutions/lessonNN.py, line N`` (``solutions/`` when no frame is there)."""
    import traceback

    folder = ROOT / "solutions"
    found = "solutions/"
    for frame in traceback.extract_tb(exc.__traceback__):
        where = Path(frame.filename)
        if where.is_relative_to(folder):
            found = f"{where.relative_to(ROOT)}, line {frame.lineno}"
    return found


def _unwritable_store() -> str | None:
    """Why the store cannot be written (its folder a file or a broken link, a lessonNN.pt a
    folder, a FIFO, a device: anything but a file, a link to one, or nothing yet, in
    :func:`cli.path_kind`'s words), checked for every store before the slow build and so before
    the first write; None when it can. (A FIFO lesson03.pt was found only once lesson01.pt and
    lesson02.pt had been rewritten: battery 21, b21b group 3.)"""
    folder = answers.ANSWERS_DIR
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
        kind = "a broken link" if not folder.exists() else "a file, not a folder"
        return f"{shown} is {kind}; the stored answers go in that folder: move it away and build again"
    for lesson in sorted({key.split(".")[0] for key in all_exercises()}):
        path = folder / f"{lesson}.pt"
        kind = cli.path_kind(path)  # never opens it: reading a FIFO would wait forever
        if kind not in (None, "missing", "a broken symlink"):  # a link is replaced, not followed
            return f"{shown / path.name} is {kind}, expected a file to replace: move it away"
    return None


def main(argv: list[str]) -> int:
    """The command line; interrupted (Ctrl-C, SIGINT, SIGTERM), it says on one line whether the
    stored answers were written (all of them or none) and returns 130 or 143."""
    cli.leaving("no stored answer was written")
    return cli.run(_main, argv, "exercise_answers.py")


def _main(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):  # what course.py's "each with --help" promises
        print(__doc__.strip())
        return 0
    if argv in (["build"], ["check"]):
        try:
            _attached_solutions()
        except SolutionsProblem as exc:
            print(f"exercise_answers {argv[0]}: {exc}; no stored answer was written", file=sys.stderr)
            return 1
    if argv == ["build"]:
        problem = _unwritable_store()
        if problem:
            print(f"exercise_answers build: {problem}; no stored answer was written", file=sys.stderr)
            return 1
        stores = {answers.ANSWERS_DIR / f"{lesson}.pt": data for lesson, data in compute().items()}
        try:
            _write_all(stores, "every stored answer was written")
        except notebook_tools.ToolError as exc:  # an OSError gave a traceback
            print(f"exercise_answers build: {exc}; no stored answer was written", file=sys.stderr)
            return 1
        for path, data in stores.items():
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"wrote {shown} ({len(data['exercises'])} exercises)")
        return 0
    if argv == ["check"]:
        problems = stale()
        if problems:
            print("stale stored answers (run `python scripts/exercise_answers.py build`):\n  "
                  + "\n  ".join(problems), file=sys.stderr)
            return 1
        print("stored answers current")
        return 0
    print(__doc__.strip(), file=sys.stderr)
    given = f"unknown arguments: {' '.join(argv)}" if argv else "no command given"
    print(f"\n{given}; expected 'build' or 'check'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
