"""Grading that cannot be had without the work (INSTRUCTORS.md, "What grading can and cannot stop").

The package ships no reference solution as code (the checks compare with stored outputs),
the call watch sees a forbidden call in any thread and notices being switched off, and the
hidden autograde test trusts only a freshly imported, hash-checked package.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import solutions
from course_utils.exercises import all_exercises, autograde, lesson03, lesson07
from course_utils.exercises.core import Feedback

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import exercise_answers  # noqa: E402


def _cat(cache, new):
    return torch.cat([cache, new], dim=2)


def _course_decode_step(q, k_new, v_new, k_cache, v_cache):
    from course_utils import grouped_query_attention

    k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
    return grouped_query_attention(q, k, v)[0], k, v


# -- no reference solution in the package --------------------------------------------------
def test_the_installed_package_has_no_reference_and_no_slip_code():
    """In a fresh interpreter (no tests' solutions attached) every check's reference and every
    mistake's implementation are absent, and no reference's source text is in the package."""
    probe = ("from course_utils.exercises import all_exercises\n"
             "ex = all_exercises()\n"
             "print(sum(e.reference is not None for e in ex.values()),"
             " sum(m.implementation is not None for e in ex.values() for m in e.mistakes), len(ex))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd="/").stdout.split()
    assert out[:2] == ["0", "0"] and int(out[2]) >= 25, out
    import inspect

    package_text = "\n".join(p.read_text() for p in (ROOT / "course_utils").rglob("*.py"))
    for lesson in solutions.LESSONS:
        for name, reference in solutions.solutions_of(lesson).REFERENCES.items():
            body = inspect.getsource(reference).split("\n", 1)[1].strip()  # without its def line
            assert body not in package_text, f"{lesson}.{name}'s reference is in course_utils"


def test_stored_answers_are_current():
    assert exercise_answers.stale() == []


def test_a_stale_store_is_detected(monkeypatch):
    references = solutions.solutions_of("lesson03").REFERENCES
    original = references["SCORE_MACS"]
    monkeypatch.setitem(references, "SCORE_MACS", lambda *args: original(*args) + 1)
    try:
        assert any("SCORE_MACS: reference outputs changed" in p for p in exercise_answers.stale())
    finally:
        monkeypatch.undo()
        solutions.attach()


def test_a_case_builder_that_changed_is_a_stale_store(monkeypatch):
    exercise = lesson03.SCORE_MACS
    cases = exercise.make_cases
    monkeypatch.setattr(exercise, "make_cases", lambda: cases()[:-1])
    assert "lesson03.SCORE_MACS: test inputs changed" in exercise_answers.stale()


def test_cases_built_at_check_time_must_match_the_store(monkeypatch):
    from course_utils.exercises import lesson06

    exercise = lesson06.GATE_IMPORTANCE  # its cases hold a loss function: built at check time
    cases = exercise.make_cases
    monkeypatch.setattr(exercise, "make_cases", lambda: cases()[:-1])
    fb = exercise.check(lambda *args: 0)
    assert fb.status == "error" and "other test inputs" in fb.message


# -- the call watch ----------------------------------------------------------------------
def test_switching_the_profiler_off_inside_the_answer_gets_no_points():
    def cheat(*args):
        sys.setprofile(None)
        return _course_decode_step(*args)

    fb = lesson07.check_decode_step(cheat)
    assert not fb.passed and fb.mistake in ("tampered_with_check", "called_reference"), fb


def test_switching_the_profiler_off_alone_is_named():
    def cheat(*args):
        sys.setprofile(None)
        k, v = _cat(args[3], args[1]), _cat(args[4], args[2])
        return torch.zeros(1), k, v

    fb = lesson07.check_decode_step(cheat)
    assert not fb.passed and fb.mistake == "tampered_with_check", fb


def test_a_twin_called_in_a_new_thread_is_named():
    def cheat(*args):
        box = []
        worker = threading.Thread(target=lambda: box.append(_course_decode_step(*args)))
        worker.start()
        worker.join()
        return box[0]

    fb = lesson07.check_decode_step(cheat)
    assert not fb.passed and fb.mistake == "called_reference", fb


def test_a_twin_called_in_a_thread_pool_made_earlier_is_named():
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()  # the worker thread exists before the check starts

        def cheat(*args):
            return pool.submit(_course_decode_step, *args).result()

        fb = lesson07.check_decode_step(cheat)
    assert not fb.passed and fb.mistake == "called_reference", fb


@pytest.mark.parametrize("how", ["stored", "torch.load"])
def test_reading_the_stored_answers_inside_the_answer_is_named(how):
    from course_utils.exercises import answers

    def cheat(seq_len, d_model, num_heads):
        if how == "stored":
            entry = answers.stored("lesson03", "SCORE_MACS")
        else:
            data = torch.load(answers.ANSWERS_DIR / "lesson03.pt", weights_only=True)
            entry = data["exercises"]["SCORE_MACS"]
        cases = lesson03.SCORE_MACS.make_cases()
        index = next(i for i, c in enumerate(cases) if c.args == (seq_len, d_model, num_heads))
        return answers.decode(entry["expected"][index])

    fb = lesson03.check_score_macs(cheat)
    assert not fb.passed and fb.mistake == "called_reference", fb


def test_the_watched_functions_are_restored_after_a_check():
    from course_utils import grouped_query_attention

    code, kwdefaults = grouped_query_attention.__code__, grouped_query_attention.__kwdefaults__
    lesson07.check_decode_step(_course_decode_step)
    assert grouped_query_attention.__code__ is code and grouped_query_attention.__kwdefaults__ == kwdefaults
    assert sys.getprofile() is None and threading.getprofile() is None


# -- checks never raise ------------------------------------------------------------------
class _Escape(BaseException):
    pass


class _NoRepr:
    def __repr__(self):
        raise RuntimeError("repr failed")


@pytest.mark.parametrize("name", sorted(all_exercises()))
def test_no_answer_makes_a_check_raise(name):
    exercise = all_exercises()[name]
    loop: list = []
    loop.append(loop)

    def escapes(*args, **kwargs):
        raise _Escape()

    answers = (escapes, lambda *a, **k: _NoRepr(), lambda *a, **k: loop,
               lambda *a, **k: (loop, _NoRepr(), loop))
    for answer in answers:
        fb = exercise.check(answer)
        assert isinstance(fb, Feedback) and not fb.passed, (name, fb)


# -- autograde: a fresh, hash-checked package --------------------------------------------
def test_grade_refuses_a_package_that_differs_from_the_manifest():
    with pytest.raises(AssertionError, match="differ from the ones this assignment was made with"):
        autograde.grade("lesson03", "check_score_macs", lambda *a: 0, "0" * 64, history=[])


def test_grade_passes_the_right_answer_and_fails_a_wrong_one(capsys):
    reference = lesson03.SCORE_MACS.reference
    manifest = autograde.manifest()

    def answer(seq_len, d_model, num_heads):
        return num_heads * seq_len * seq_len * (d_model // num_heads)

    assert lesson03.check_score_macs(answer).passed, "the test's own answer must be right"
    autograde.grade("lesson03", "check_score_macs", answer, manifest, history=[])
    with pytest.raises(AssertionError, match="not attempted"):
        def stub(*args):
            raise NotImplementedError
        autograde.grade("lesson03", "check_score_macs", stub, manifest, history=[])
    assert reference is lesson03.SCORE_MACS.reference


@pytest.mark.parametrize("cheat", [
    "lesson02.check_softmax_rows = lambda fn: Feedback('x', 'correct', 'ok')",
    "Feedback.assert_passed = lambda self: print(self)",
    "setattr(lesson06, 'check_mean_ablation', lambda fn: None)",
    "import sys; sys.setprofile(None)",
    "from course_utils.exercises import answers; answers.stored('lesson02', 'SOFTMAX_ROWS')",
    "table = torch.load(path, weights_only=True)",
    "f.__code__ = g.__code__",
])
def test_grade_refuses_a_kernel_whose_history_shows_tampering(cheat):
    with pytest.raises(AssertionError, match="interfere with grading"):
        autograde.grade("lesson03", "check_score_macs", lambda *a: 0, autograde.manifest(),
                        history=["import torch", cheat, "# the test cell"])


def test_honest_lesson_code_is_not_taken_for_tampering():
    import json

    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        assert autograde.tampering_in(sources) == [], path.name


# -- found by the bad-input review (issue 29) ----------------------------------------------
def test_an_object_whose_eq_says_yes_is_not_a_right_answer():
    from course_utils.exercises import lesson06

    class AlwaysEqual:
        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

    assert not lesson06.check_narrow_head(lambda table: AlwaysEqual()).passed
    agreeable = type("AgreeableStr", (str,), {"__eq__": lambda a, b: True, "__hash__": str.__hash__})
    assert not lesson06.check_narrow_head(lambda table: agreeable("x")).passed


def test_an_integer_result_of_whole_numbers_is_named_by_its_dtype():
    from course_utils.exercises import lesson04

    reference = lesson04.HEAD_WEIGHTS.reference  # whole-number test weights: .long() keeps the values
    feedback = lesson04.HEAD_WEIGHTS.check_trusted(lambda *a: tuple(w.long() for w in reference(*a)))
    assert not feedback.passed and "dtype torch.int64" in feedback.message


def test_a_builtin_twin_called_through_map_or_an_earlier_thread_is_named():
    """torch.softmax is ruled out in exercise 2.1 (numpy only): called from C through map, or in
    a thread pool started before the check, it is still seen."""
    import functools

    from course_utils.exercises import lesson02

    def through_map(scores):
        softmax = functools.partial(torch.softmax, dim=-1)
        return next(iter(map(softmax, [torch.from_numpy(scores)]))).numpy()

    assert lesson02.check_softmax_rows(through_map).mistake == "called_reference"
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()

        def in_the_pool(scores):
            return pool.submit(lambda: torch.softmax(torch.from_numpy(scores), dim=-1)).result().numpy()

        fb = lesson02.check_softmax_rows(in_the_pool)
    assert fb.mistake == "called_reference", fb
    assert not hasattr(torch.softmax, "_course_recording")  # put back after the check


def test_honest_answers_are_not_accused():
    import pickle

    from course_utils.exercises import lesson01

    def attend(scores, values):
        weights = torch.softmax(scores, dim=-1)
        return pickle.loads(pickle.dumps(weights)) @ values  # a round trip through pickle is no cheat

    assert lesson01.check_attend(attend).passed

    def endless(scores, values):
        return endless(scores, values)

    fb = lesson01.check_attend(endless)
    assert fb.status == "error" and "RecursionError" in fb.message and fb.mistake != "tampered_with_check"


def test_an_answer_far_too_large_is_refused_by_its_shape_first():
    from course_utils.exercises import lesson01

    fb = lesson01.check_attend(lambda scores, values: torch.zeros(1).expand(2**31))
    assert not fb.passed and "shape" in fb.message


def test_autograde_watches_the_students_earlier_copy_of_the_package(monkeypatch):
    """The hidden test imports course_utils afresh; a pool thread made earlier still calls the
    first copy's twin, which the fresh check watches too (through ``kept``)."""
    import importlib
    import sys as _sys

    from course_utils.exercises import lesson03

    old = {k: v for k, v in _sys.modules.items() if k == "course_utils" or k.startswith("course_utils.")}
    old_macs = old["course_utils.attention.shapes"].mha_macs
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()

        def answer(seq_len, d_model, num_heads):  # the first copy's library function, in the pool
            return pool.submit(old_macs, 1, seq_len, d_model, num_heads).result().scores

        for name in old:
            monkeypatch.delitem(_sys.modules, name)
        try:
            importlib.import_module("course_utils.exercises.autograde")
            fresh = _sys.modules["course_utils.exercises.autograde"]
            fresh.grade("lesson03", "check_score_macs", answer, fresh.manifest(), history=[])  # unseen
            with pytest.raises(AssertionError, match="you called the reference"):
                fresh.grade("lesson03", "check_score_macs", answer, fresh.manifest(), history=[], kept=old)
        finally:
            for name in [k for k in _sys.modules if k == "course_utils" or k.startswith("course_utils.")]:
                del _sys.modules[name]
            _sys.modules.update(old)
    assert lesson03.check_score_macs is _sys.modules["course_utils.exercises.lesson03"].check_score_macs


# -- unseen cases at autograde ------------------------------------------------------------
def test_unseen_cases_differ_from_the_shipped_ones_for_nearly_every_exercise():
    from course_utils.exercises import answers

    def stored_form(cases):
        encoded = [answers.encode_case(c) for c in cases]
        return {"cases": None if None in encoded else encoded}

    same = [name for name, ex in all_exercises().items()
            if exercise_answers._same_cases(stored_form(ex.make_cases()),
                                            stored_form(autograde.unseen_cases(ex, 4242)))]
    # 4.4 builds its masks from fixed lengths, 6.3 from fixed tables; 6.2's cases hold a closure
    # (which cannot be compared, but its model and tokens are drawn from seeded generators)
    assert same == ["lesson04.MASKS_FOR_TORCH", "lesson06.GATE_IMPORTANCE", "lesson06.NARROW_HEAD"]


def test_a_lookup_of_the_stored_outputs_fails_on_unseen_cases(capsys):
    """A disguised lookup passes every check the student can run, and fails at autograde."""
    from course_utils.exercises import answers

    store = getattr(torch, "lo" + "ad")(answers.ANSWERS_DIR / "lesson03.pt", weights_only=True)
    cases = lesson03.SCORE_MACS.make_cases()
    table = {c.args: answers.decode(o) for c, o in zip(cases, store["exercises"]["SCORE_MACS"]["expected"],
                                                       strict=True)}

    def looked_up(seq_len, d_model, num_heads):
        return table.get((seq_len, d_model, num_heads), 0)

    def honest(seq_len, d_model, num_heads):
        return num_heads * seq_len * seq_len * (d_model // num_heads)

    assert lesson03.check_score_macs(looked_up).passed  # what the student sees while practising
    solutions_dir = str(ROOT / "solutions")
    autograde.grade("lesson03", "check_score_macs", honest, autograde.manifest(), history=[], salt=77,
                    solutions_dir=solutions_dir)
    assert "also correct on 5 unseen test case(s)" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="test cases your notebook has not seen"):
        autograde.grade("lesson03", "check_score_macs", looked_up, autograde.manifest(), history=[],
                        salt=77, solutions_dir=solutions_dir)
