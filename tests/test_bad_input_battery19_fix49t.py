"""Battery 19 (b19b) fixes in course_utils/exercises: G2 run_with_your_attention and a Tensor
subclass, G3 causal_attention_with on a meta / non-finite x, G4 check_score_macs on an int beyond
float's range, G1 an answer's thread left running during the in-kernel check."""

import threading

import numpy as np
import pytest
import torch

from course_utils.exercises import core, lesson02, lesson03
from course_utils.exercises.your_attention import causal_attention_with, run_with_your_attention
from course_utils.model.checkpoint import load_checkpoint


class _Lie(torch.Tensor):
    """A tensor subclass whose comparisons always say yes."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose", "eq", "__eq__"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def _zeros_as(kind):
    def fn(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return torch.zeros_like(x).as_subclass(kind)
    return fn


@pytest.fixture(scope="module")
def attn():
    return load_checkpoint("induction")[0].blocks[0].attn


# --- G2 ------------------------------------------------------------------------------
def test_a_subclass_result_is_reported_not_raised():
    report = run_with_your_attention(_zeros_as(_Lie), batch_size=4)
    assert report.yours is None
    assert "_Lie" in report.error and "subclass" in report.error


def test_causal_attention_with_refuses_a_subclass_result(attn):
    x = torch.randn(1, 3, attn.d_model)
    with pytest.raises(TypeError, match=r"_Lie.*not a torch.Tensor"):
        causal_attention_with(_zeros_as(_Lie), x, attn)


# --- G3 ------------------------------------------------------------------------------
@pytest.mark.parametrize(("bad", "shown"), [
    (lambda d: torch.empty(1, 3, d, device="meta"), "meta"),
    (lambda d: torch.full((1, 3, d), float("nan")), "nan"),
    (lambda d: torch.zeros(1, 3, d).index_fill_(2, torch.tensor([1]), float("inf")), "inf"),
])
def test_causal_attention_with_refuses_an_x_without_finite_values(attn, bad, shown):
    def never(*args, causal=False):
        raise AssertionError("fn must not be called on a bad x")
    with pytest.raises(ValueError, match=r"\bx\b") as info:
        causal_attention_with(never, bad(attn.d_model), attn)
    assert shown in str(info.value)


# --- G4 ------------------------------------------------------------------------------
@pytest.mark.parametrize("huge", [10**400, -(10**400)], ids=["huge", "minus_huge"])
def test_score_macs_names_an_int_beyond_float_range(huge):
    feedback = lesson03.check_score_macs(lambda T, d, h: huge)
    assert not feedback.passed
    text = str(feedback)
    assert "OverflowError" not in text
    assert "expected int" in text and f"got int {str(huge)[:20]}" in text


def test_a_nan_answer_is_blamed_on_the_answer_not_on_x():
    def nan_answer(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return torch.full_like(x, float("nan"))
    report = run_with_your_attention(nan_answer, batch_size=4)
    assert report.yours is None and "nan" in report.error and "x must" not in report.error


# --- G1 ------------------------------------------------------------------------------
def _softmax(scores):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class _Patcher(threading.Thread):
    def __init__(self, stop):
        super().__init__(name="patcher-subclass", daemon=True)
        self.stop = stop

    def run(self):
        if not self.stop.wait(30):
            core.outputs_close = lambda *a, **k: True


def _timer(stop):
    return threading.Timer(30, lambda: setattr(core, "outputs_close", lambda *a, **k: True))


def _builtin_timer(stop):  # a Timer whose function is a built-in, with no code of its own
    return threading.Timer(30, setattr, (core, "outputs_close", lambda *a, **k: True))


def _target_thread(stop):
    def later():
        if not stop.wait(30):
            core.outputs_close = lambda *a, **k: True
    return threading.Thread(target=later, name="patcher-target", daemon=True)


@pytest.mark.parametrize("make", [_timer, _builtin_timer, _target_thread, _Patcher],
                         ids=["timer", "builtin_timer", "target", "subclass"])
def test_an_answer_that_leaves_its_thread_running_is_not_graded(make):
    original, stop, started = core.outputs_close, threading.Event(), []

    def answer(scores):  # right values, zeros would be as good: nothing is compared
        if not started:
            started.append(make(stop))
            started[0].daemon = True
            started[0].start()
        return _softmax(scores)
    try:
        feedback = lesson02.check_softmax_rows(answer)
    finally:
        stop.set()
        if hasattr(started[0], "cancel"):
            started[0].cancel()
        started[0].join(5)
        core.outputs_close = original
    assert not feedback.passed and feedback.mistake == "left_a_thread", feedback
    assert started[0].name in feedback.message and "0 points" in feedback.message


def test_an_answer_whose_thread_ends_before_it_returns_is_graded():
    def answer(scores):
        out = []
        worker = threading.Thread(target=lambda: out.append(_softmax(scores)))
        worker.start()
        worker.join()
        return out[0]
    assert lesson02.check_softmax_rows(answer).passed


# -- G8: an answer that fills its memory limit ------------------------------------------------
# When memory runs out while the call watch's profiler is being called, the interpreter switches
# the profiler off and raises the audit event "sys.setprofile" itself. The grader reported that as
# the answer's doing ("refused: sys.setprofile"). The answer below fills its address space (bytes()
# is calloc: no pages touched) and then switches the profiler off, which reaches the same event
# with memory exhausted every time; the intermittent original reached it from the profiler.
_FILL_THEN_SETPROFILE = (
    "import sys\n"
    "def softmax_rows(scores):\n"
    "    keep = []\n"
    "    try:\n"
    "        size = 1 << 30\n"
    "        while size >= 64:\n"
    "            try:\n"
    "                keep.append(bytes(size))\n"
    "            except MemoryError:\n"
    "                size //= 2\n"
    "    except MemoryError:\n"
    "        pass\n"
    "{setprofile}"
    "    return scores\n")


def _run_with_little_memory(code):
    """The answer's process as the grader runs it, without the grader's reading of the source
    first (which refuses `import sys` before anything runs)."""
    from course_utils.exercises import autograde, lesson02, sandbox

    cases = autograde.cases_of(lesson02.check_softmax_rows.__self__)
    return sandbox.run_answer(code, "softmax_rows", "lesson02.check_softmax_rows", [cases], per_call=20,
                              memory=1024 * 2**20).lost or ""


def test_an_answer_that_runs_out_of_memory_is_told_so_not_refused():
    lost = _run_with_little_memory(_FILL_THEN_SETPROFILE.format(setprofile="    sys.setprofile(None)\n"))
    assert lost == "it ran out of memory (MemoryError) under the grader's memory limit of 1,024 MiB", lost


def test_switching_the_profiler_off_with_memory_left_is_still_refused():
    freed = "    del keep\n    sys.setprofile(None)\n"
    lost = _run_with_little_memory(_FILL_THEN_SETPROFILE.format(setprofile=freed))
    assert lost.startswith("refused: sys.setprofile"), lost
