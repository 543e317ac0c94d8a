#!/usr/bin/env python3
"""Build or check the exercises' stored answers (course_utils/exercises/answers/lessonNN.pt).

    python scripts/exercise_answers.py build   # run solutions/ on every check's cases, store the outputs
    python scripts/exercise_answers.py check   # exit 1 (naming the exercises) when the store is stale

The checks grade learners' answers against these outputs, so the package ships no
reference solution as code. Run ``build`` after changing a reference, a mistake or a case
builder, and commit the .pt files with that change.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from course_utils.exercises import all_exercises, answers  # noqa: E402
from course_utils.exercises.core import _call, outcome, outputs_close  # noqa: E402


def compute() -> dict[str, dict]:
    """lesson -> the data its .pt file holds, computed from solutions/."""
    import solutions

    solutions.attach()
    torch.manual_seed(0)
    by_lesson: dict[str, dict] = {}
    for full_name, exercise in sorted(all_exercises().items()):
        lesson, name = full_name.split(".")
        cases = list(exercise.make_cases())
        entry = {"digest": answers.cases_digest(cases),
                 "expected": [answers.encode(_call(exercise.reference, c)) for c in cases],
                 "mistakes": {m.key: [answers.encode(outcome(m.implementation, c)) for c in cases]
                              for m in exercise.mistakes}}
        by_lesson.setdefault(lesson, {"format": answers.FORMAT, "exercises": {}})["exercises"][name] = entry
    return by_lesson


def _write_atomically(path: Path, data: dict) -> None:
    buffer = io.BytesIO()
    torch.save(data, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buffer.getvalue())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def stale() -> list[str]:
    """Exercises whose stored answers differ from what solutions/ computes now. Outputs are
    compared to 1e-6 (float32 results move in the last bit with the number of threads)."""
    problems = []
    for lesson, data in compute().items():
        path = answers.ANSWERS_DIR / f"{lesson}.pt"
        if not path.exists():
            problems.append(f"{path.name} is missing")
            continue
        saved = torch.load(path, weights_only=True)["exercises"]
        for name, entry in data["exercises"].items():
            old = saved.get(name)
            fresh = {"expected": [answers.decode(v) for v in entry["expected"]],
                     "mistakes": {k: [answers.decode(v) for v in vs] for k, vs in entry["mistakes"].items()}}
            if old is None or old["digest"] != entry["digest"]:
                problems.append(f"{lesson}.{name}: test inputs changed")
                continue
            kept = {"expected": [answers.decode(v) for v in old["expected"]],
                    "mistakes": {k: [answers.decode(v) for v in vs] for k, vs in old["mistakes"].items()}}
            if not outputs_close(kept["expected"], fresh["expected"], rtol=1e-6, atol=1e-6):
                problems.append(f"{lesson}.{name}: reference outputs changed")
            if sorted(kept["mistakes"]) != sorted(fresh["mistakes"]):
                problems.append(f"{lesson}.{name}: the list of mistakes changed")
                continue
            for key, outs in fresh["mistakes"].items():
                if not _same_outcomes(kept["mistakes"][key], outs):
                    problems.append(f"{lesson}.{name}: mistake {key!r} changed")
        problems += [f"{lesson}.{name}: stored but no longer an exercise" for name in saved
                     if name not in data["exercises"]]
    return problems


def _same_outcomes(a: list, b: list) -> bool:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, answers.Raised) or isinstance(y, answers.Raised):
            if not (isinstance(x, answers.Raised) and isinstance(y, answers.Raised) and x.kind == y.kind):
                return False
        elif not outputs_close(x, y, rtol=1e-6, atol=1e-6):
            return False
    return True


def main(argv: list[str]) -> int:
    if argv == ["build"]:
        for lesson, data in compute().items():
            path = answers.ANSWERS_DIR / f"{lesson}.pt"
            _write_atomically(path, data)
            print(f"wrote {path.relative_to(ROOT)} ({len(data['exercises'])} exercises)")
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
    print(f"\nunknown arguments: {' '.join(argv) or '(none)'}; expected 'build' or 'check'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
