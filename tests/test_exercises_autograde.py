"""Grading that cannot be had without the work (INSTRUCTORS.md, "Grading outside the notebook").

The package ships no reference solution as code (the checks compare with stored outputs),
the call watch sees a forbidden call in any thread and notices being switched off (feedback
while learning), and at autograde the answer's code, taken by its syntax tree, runs in an
isolated process whose plain outputs the grader compares with the exercise's own check.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

import solutions
from course_utils.exercises import all_exercises, autograde, lesson03, lesson07, outputs_close, sandbox
from course_utils.exercises.core import Feedback

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import exercise_answers  # noqa: E402
from graded_here import graded_here, graded_outside  # noqa: E402


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


# -- unseen cases at autograde ------------------------------------------------------------
# The quick suite compares here; CI's slow step also grades end to end (answer and references
# in processes of their own). test_a_lookup_of_the_stored_outputs_fails_on_unseen_cases grades
# end to end in the quick suite too.
GRADERS = [pytest.param(graded_here, id="compared-here"),
           pytest.param(lambda *a: graded_outside(*a, solutions_dir=str(ROOT / "solutions")), id="outside",
                        marks=pytest.mark.slow)]


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


def test_a_lookup_of_the_stored_outputs_fails_on_unseen_cases():
    """A lookup table pasted into the answer passes every check the student can run, and fails
    at autograde, where the answer runs apart on unseen cases."""
    from course_utils.exercises import answers

    store = torch.load(answers.ANSWERS_DIR / "lesson03.pt", weights_only=True)
    cases = lesson03.SCORE_MACS.make_cases()
    table = {c.args: answers.decode(o) for c, o in zip(cases, store["exercises"]["SCORE_MACS"]["expected"],
                                                       strict=True)}
    looked_up = (f"def score_macs(seq_len, d_model, num_heads):\n"
                 f"    return {table!r}.get((seq_len, d_model, num_heads), 0)\n")
    namespace: dict = {}
    exec(looked_up, namespace)
    assert lesson03.check_score_macs(namespace["score_macs"]).passed  # what the student sees
    # end to end, in the README's test command too: the answer's process and the references'
    wrong = autograde.grade_answer("lesson03", "check_score_macs", looked_up, "score_macs", salt=77,
                                   solutions_dir=str(ROOT / "solutions"))
    assert not wrong.passed and "not seen" in wrong.message, wrong


@pytest.mark.parametrize("grade", GRADERS)
def test_an_honest_answer_passes_the_unseen_cases_too(grade):
    """The other side of the lookup above: an answer that computes, under the same salt."""
    honest = ("def score_macs(seq_len, d_model, num_heads):\n"
              "    return num_heads * seq_len * seq_len * (d_model // num_heads)\n")
    right = grade("lesson03", "check_score_macs", honest, "score_macs", 77)
    assert right.passed and "5 of them unseen" in right.message, right


@pytest.mark.parametrize("grade", GRADERS)
def test_the_feedback_on_unseen_cases_shows_nothing_of_them(grade):
    """C15 of the cold trial: an answer that raises its inputs as a message, or returns a wrong
    value, learns nothing of an unseen case from its feedback (not its label, inputs, expected
    output or the message it raised), so it cannot look them up at the next grading."""
    import re

    table = {c.args for c in lesson03.SCORE_MACS.make_cases()}
    for body in ("    raise ValueError(repr((seq_len, d_model, num_heads)))",
                 "    return -12345"):
        code = (f"def score_macs(seq_len, d_model, num_heads):\n"
                f"    if (seq_len, d_model, num_heads) in {table!r}:\n"
                f"        return num_heads * seq_len * seq_len * (d_model // num_heads)\n{body}\n")
        feedback = grade("lesson03", "check_score_macs", code, "score_macs", 77)
        assert not feedback.passed and "not seen" in feedback.message, feedback
        assert not re.search(r"\d", feedback.message), feedback.message  # no number of the case at all


# -- the outside grader (issue 34): the answer's code, taken by its syntax tree -----------------
def test_answer_source_keeps_the_function_what_it_calls_and_its_imports_only():
    cells = ["import torch\nimport numpy as np\nimport pandas as pd\nprint('hello')\nSCALE = 2",
             "def _helper(x):\n    return torch.relu(x) * np.float64(1)\n\ndef unrelated():\n    return pd",
             "%timeit 1\nopen('x', 'w').write('a top-level statement')\n"
             "def answer(x):\n    return _helper(x)\n\nanswer(torch.zeros(1))"]
    code = sandbox.answer_source(cells, "answer", answer_cell=2)
    tree = ast.parse(code)
    assert [type(n).__name__ for n in tree.body] == ["Import", "Import", "FunctionDef", "FunctionDef"]
    assert "print" not in code and "open(" not in code and "SCALE" not in code and "pandas" not in code
    assert "unrelated" not in code and "answer(torch.zeros(1))" not in code
    with pytest.raises(sandbox.AnswerProblem, match="no function `missing`"):
        sandbox.answer_source(cells, "missing")
    with pytest.raises(sandbox.AnswerProblem, match="SyntaxError"):
        sandbox.answer_source(["def answer(:"], "answer", answer_cell=0)


def test_the_release_stub_is_known_without_running_it():
    assert sandbox.is_stub("def f(x):\n    raise NotImplementedError()\n", "f")
    assert sandbox.is_stub('def f(x):\n    """doc"""\n    raise NotImplementedError("your code here")\n', "f")
    assert not sandbox.is_stub("def f(x):\n    print(1)\n    raise NotImplementedError()\n", "f")
    assert not sandbox.is_stub("@cache\ndef f(x):\n    raise NotImplementedError()\n", "f")
    assert not sandbox.is_stub("def f(x):\n    raise NotImplementedError('later')\n", "f")


_TWINS_AND_LOOKUPS = [  # the twins and lookups of the instructor trial (issue 34): check, import, body
    ("lesson02.check_softmax_rows", "import torch", "torch.special.softmax(torch.tensor(a[0]), -1).numpy()"),
    ("lesson02.check_softmax_rows", "import torch", "getattr(torch, 'soft' + 'max')(a[0], -1)"),
    ("lesson02.check_softmax_rows", "from course_utils.tasks.worked_example import _softmax_rows",
     "_softmax_rows(a[0])"),
    ("lesson02.check_attention_weights", "import torch",
     "torch.ops.aten._scaled_dot_product_attention_math(a[0], a[1], a[1])[1]"),
    ("lesson02.check_causal_attention_weights", "from course_utils import causal_mask", "causal_mask(3)"),
    ("lesson04.check_head_weights", "from course_utils.attention.naive_mha import naive_from_batched",
     "naive_from_batched(a[0])"),
    ("lesson04.check_mha_forward", "import torch", "torch._native_multi_head_attention(*a)"),
    ("lesson07.check_decode_step", "from course_utils import grouped_query_attention",
     "grouped_query_attention(*a)"),
    ("lesson03.check_score_macs", "import sys", "sys._getframe(1).f_locals['expected'][0]"),
    ("lesson03.check_score_macs", "from solutions.lesson03 import REFERENCES",
     "REFERENCES['SCORE_MACS'](*a)"),
    ("lesson03.check_score_macs", "import os", "0 if os.environ.get('NBGRADER_EXECUTION') else 1"),
]


@pytest.mark.parametrize(("check", "code"),
                         [(c, f"{i}\ndef f(*a):\n    return {b}\n") for c, i, b in _TWINS_AND_LOOKUPS])
def test_code_no_answer_needs_is_named_without_running_it(check, code):
    assert sandbox.rules_broken(code, check), code
    lesson, name = check.split(".")
    feedback = autograde.grade_answer(lesson, name, code, "f", salt=None, solutions_dir=None)
    assert not feedback.passed and feedback.mistake == "called_reference", feedback


def test_the_lessons_own_answers_break_no_rule_and_pass_outside_the_notebook():
    """Every solution cell of every lesson, taken as autograde takes it, is accepted by the rules
    (the grading of all of them runs in the slow course test)."""
    import nbformat

    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        for i, cell in enumerate(code_cells):
            call = autograde._check_call(cell.source)
            if call is None or i == 0:
                continue
            code = sandbox.answer_source([c.source for c in code_cells[:i]], call["arg"], i - 1)
            assert sandbox.rules_broken(code, f"{call['module']}.{call['check']}") == [], (path.name, code)


# -- what comes back from the answer's process ----------------------------------------------------
class _Agreeable(torch.Tensor):
    def allclose(self, *args, **kwargs):
        return True


@pytest.mark.parametrize("value", [
    torch.zeros(2).as_subclass(_Agreeable), torch.zeros(2, dtype=torch.complex64), 1 + 5j,
    np.zeros(2, dtype=complex), np.array([object()]), type("Int", (int,), {})(3), torch.zeros(2).to_sparse(),
    np.zeros(2).view(np.recarray), (torch.zeros(1), lambda: 1), {1: 2}, np.complex128(1),
])
def test_only_plain_outputs_of_a_real_dtype_are_accepted(value):
    with pytest.raises(sandbox.Refused):
        sandbox.to_plain(value)


def test_plain_outputs_come_back_as_they_were_and_forged_ones_are_refused():
    value = (torch.arange(3.0), np.arange(2, dtype=np.int32), np.float32(1.5), [1, 2.5, "x", None, True],
             {"a": torch.ones(1, dtype=torch.bool)})
    back = sandbox.accept(sandbox.to_plain(value))
    assert outputs_close(back, value) and type(back[2]) is np.float32 and back[1].dtype == np.int32
    for forged in ({"__tensor__": torch.zeros(1, dtype=torch.complex64)},
                   {"__ndarray__": torch.zeros(1), "dtype": "c16"},
                   {"__tensor__": torch.zeros(1), "extra": 1}, {"__npscalar__": "1", "dtype": "f8"}):
        with pytest.raises(sandbox.Refused):
            sandbox.accept(forged)


# -- the answer's process: isolated, limited, ended -----------------------------------------------
def _run(code: str, *, per_call: int = 30, memory: int = 4 * 2**30, hide=(), cases: int = 1) -> list:
    run = sandbox.run_answer(code, "score_macs", "lesson03.check_score_macs",
                             [lesson03.SCORE_MACS.make_cases()[:cases]],
                             per_call=per_call, memory=memory, hide=hide)
    assert run.lost is None and run.defined is None, run
    return run.outcomes[0]


# A memory limit other than the default (4 GiB), to show the argument is applied. Not lower: the
# answer's process imports torch, and PyPI's CUDA build alone maps 3.0-3.2 GiB of address space
# (torch 2.5.1+cu124 to 2.15.0+cu132; Colab has such a build), so under 3 GiB it dies importing.
OTHER_MEMORY = 6 * 2**30


def test_the_answer_process_has_time_and_memory_limits():
    """A call that never returns is stopped at its time limit, and the call after it is not run
    (recorded as stopped by the same limit); a call that asks for more memory than the process
    may have gets MemoryError. Each outcome is asserted."""
    slow, skipped = _run("def score_macs(*a):\n    while True:\n        pass\n", per_call=1, cases=2)
    assert slow.kind == "raised" and slow.error[0] == "TimeoutError", slow
    assert skipped.kind == "raised" and skipped.error[1].startswith("not run: an earlier call"), skipped
    (greedy,) = _run("def score_macs(*a):\n    return len(bytearray(8 * 2**30))\n", per_call=30,
                     memory=OTHER_MEMORY)
    assert greedy.kind == "raised" and greedy.error[0] == "MemoryError", greedy


def test_an_answer_that_starts_a_process_is_refused_and_leaves_none_behind():
    import time

    run = sandbox.run_answer("import subprocess\ndef score_macs(*a):\n"
                             "    subprocess.Popen(['sleep', '613'])\n    return 0\n",
                             "score_macs", "lesson03.check_score_macs",
                             [lesson03.SCORE_MACS.make_cases()[:1]])
    assert run.lost is not None and run.lost.startswith("refused: subprocess.Popen"), run
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "sleep 613"], capture_output=True, text=True).stdout.split()
    assert left == [], left


def test_without_bubblewrap_the_answer_still_runs_apart_and_the_grader_says_so():
    code = "import os\ndef score_macs(*a):\n    return os.getpid()\n"
    run = sandbox.run_answer(code, "score_macs", "lesson03.check_score_macs",
                             [lesson03.SCORE_MACS.make_cases()[:1]], sandbox=False)
    assert run.isolation == "subprocess only" and run.outcomes[0][0].value != __import__("os").getpid()
    assert "bubblewrap" in sandbox.WARNING and "INSTRUCTORS.md" in sandbox.WARNING


@pytest.mark.skipif(sandbox.isolation() != "bubblewrap", reason="bubblewrap cannot make a sandbox here")
def test_the_answer_process_sees_neither_the_course_nor_the_clone(tmp_path):
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("grades")
    probe = ("from pathlib import Path\n"
             "def score_macs(*a):\n"
             "    seen = []\n"
             f"    for path in ({str(course / 'gradebook.db')!r},\n"
             f"                 {str(ROOT / 'solutions' / 'lesson03.py')!r},\n"
             f"                 {str(ROOT / 'notebooks')!r}):\n"
             "        seen.append(Path(path).exists())\n"
             "    return tuple(seen)\n")
    outcome = _run(probe, hide=[course])[0]
    assert outcome.kind == "value" and outcome.value == (False,) * 3, outcome
    for path in (ROOT / "course_utils" / "exercises" / "core.py", course / "planted.txt"):
        writer = f"def score_macs(*a):\n    open({str(path)!r}, 'a').close()\n    return 0\n"
        run = sandbox.run_answer(writer, "score_macs", "lesson03.check_score_macs",
                                 [lesson03.SCORE_MACS.make_cases()[:1]], hide=[course])
        assert run.lost is not None and run.lost.startswith("refused: open for writing"), run
    assert not (course / "planted.txt").exists()


# -- the grader's verdict: the exercise's own check, replayed ------------------------------------
# The grader's verdict on the reference and on each slip (replaying their recorded outputs
# through the exercise's check gives the notebook's verdict) is asserted in tests/test_exercises.py,
# next to the notebook's own verdict on each, which it reuses (test_reference_passes,
# test_each_mistake_is_named).


def test_secrets_are_new_for_each_release_and_the_instructors_only(tmp_path):
    lessons = ["02_single_head_attention", "07_grouped_query_attention"]
    first = json.loads(autograde.write_secrets(tmp_path, lessons, ROOT / "solutions").read_text())
    second = json.loads(autograde.write_secrets(tmp_path, lessons, ROOT / "solutions").read_text())
    assert first["salts"][lessons[0]] != first["salts"][lessons[1]] and first["salts"] != second["salts"]
    assert (tmp_path / autograde.SECRETS_NAME).stat().st_mode & 0o077 == 0
    assert second["manifest"] == autograde.manifest()


def _shapes(cases):
    return [tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else repr(a) for a in c.args) for c in cases]


@pytest.mark.parametrize("lesson, exercise", [
    ("lesson03", "SPLIT_HEADS"), ("lesson03", "MERGE_HEADS"), ("lesson04", "HEAD_WEIGHTS"),
    ("lesson04", "STACK_HEAD_WEIGHTS"), ("lesson07", "REPEAT_KV"), ("lesson07", "DECODE_STEP")])
def test_unseen_cases_draw_their_sizes_too(lesson, exercise):
    """C18 of the cold trial: with only the values salted, an index map read off the shipped
    outputs (which input entry lands where) passed the unseen cases of these copying exercises.
    Under any salt, no unseen case has a seen case's sizes, while the seen cases stay the ones
    the stored answers were made for."""
    ex = getattr(importlib.import_module(f"course_utils.exercises.{lesson}"), exercise)
    seen = _shapes(ex.make_cases())
    assert seen == _shapes(autograde.cases_of(ex))  # the stored inputs: unchanged
    for salt in (1, 77, 12345, 2**31 - 2):
        unseen = _shapes(autograde.cases_of(ex, salt))
        assert len(unseen) == len(seen) and not set(unseen) & set(seen), (salt, unseen, seen)


@pytest.mark.parametrize("grade", GRADERS)
def test_an_index_map_from_the_shipped_outputs_scores_nothing_unseen(grade):
    """An answer that copies entries by a table keyed on the seen cases' sizes (the trial's 7.1
    cheat) passes the notebook's own check and fails the grader; the honest answer passes both."""
    from solutions.lesson07 import _repeat_kv as reference

    table = {}
    for case in lesson07.REPEAT_KV.make_cases():
        kv, h = case.args
        out = reference(torch.arange(kv.numel(), dtype=torch.float64).view(kv.shape), h)  # entries = indices
        table[(tuple(kv.shape), h)] = (out.long().flatten().tolist(), tuple(out.shape))
    looked_up = ("import torch\n\n"
                 "def repeat_kv(kv, num_heads):\n"
                 f"    index, shape = {table!r}[(tuple(kv.shape), num_heads)]\n"
                 "    return kv.flatten()[torch.tensor(index)].reshape(shape)\n")
    honest = ("def repeat_kv(kv, num_heads):\n"
              "    return kv.repeat_interleave(num_heads // kv.shape[1], dim=1)\n")
    namespace: dict = {}
    exec(looked_up, namespace)
    assert lesson07.check_repeat_kv(namespace["repeat_kv"]).passed  # what the student sees
    right = grade("lesson07", "check_repeat_kv", honest, "repeat_kv", 77)
    assert right.passed, right
    wrong = grade("lesson07", "check_repeat_kv", looked_up, "repeat_kv", 77)
    assert not wrong.passed and "not seen" in wrong.message, wrong


def test_an_answer_that_grows_its_callers_list_is_named_outside_the_kernel_too():
    from course_utils.exercises import lesson04

    code = ("import torch\n"
            "def stack_head_weights(q_parts, k_parts, v_parts):\n"
            "    q_parts.extend(k_parts)\n"
            "    q_parts.extend(v_parts)\n"
            "    return torch.cat(q_parts, dim=0)\n")
    cases = autograde.cases_of(lesson04.STACK_HEAD_WEIGHTS)
    run = sandbox.run_answer(code, "stack_head_weights", "lesson04.check_stack_head_weights", [cases])
    assert run.lost is None and run.defined is None, run
    feedback = autograde.feedback_from("lesson04", "check_stack_head_weights", "stack_head_weights", run,
                                       cases)
    assert not feedback.passed and feedback.mistake == "changed_callers_list", feedback


def test_a_pasted_copy_of_a_graded_cell_is_graded_and_stops_no_other_submission():
    """A cell copied and pasted (two cells with one grade_id): nbgrader's DeduplicateIds left the
    earlier copy's metadata `{}`, which CheckCellMetadata took for an old metadata format, and that
    error stopped `nbgrader autograde` for every later student. The course's sanitising step keeps
    the last copy graded and makes the earlier one plain code, so the notebook validates."""
    pytest.importorskip("nbgrader")
    import nbformat
    from nbgrader.preprocessors import CheckCellMetadata
    from traitlets.config import Config

    c = Config()
    autograde.configure(c, ".")
    names = [p.__name__ for p in c.Autograde.sanitize_preprocessors]
    assert "KeepLastOfDuplicateIds" in names and "DeduplicateIds" not in names
    assert names.index("KeepLastOfDuplicateIds") < names.index("CheckCellMetadata")

    def cell(source, grade_id, **flags):
        meta = {"grade": False, "solution": False, "locked": False, "grade_id": grade_id,
                "schema_version": 3, **flags}
        return nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})

    nb = nbformat.v4.new_notebook(cells=[
        cell("def f():\n    return 1\n", "lesson03_score_macs", solution=True),
        cell("def f():\n    return 2\n", "lesson03_score_macs", solution=True),  # the pasted copy
        cell("lesson03.check_score_macs(f)", "lesson03_score_macs_test", grade=True, locked=True, points=1),
    ])
    nb, _ = autograde.KeepLastOfDuplicateIds().preprocess(nb, {})
    assert "nbgrader" not in nb.cells[0].metadata  # the earlier copy: plain code
    assert nb.cells[1].metadata["nbgrader"]["grade_id"] == "lesson03_score_macs"
    CheckCellMetadata().preprocess(nb, {})  # validates: no "old metadata format" stop
