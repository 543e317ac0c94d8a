"""The check machinery itself: every path ends in feedback, never a traceback."""

import pytest
import torch

from course_utils.exercises import Case, Exercise, Feedback, Mistake, outputs_close

EX = Exercise(
    title="double",
    reference=lambda x: 2 * x,
    make_cases=lambda: [Case((torch.arange(3.0),), label="arange(3)")],
    mistakes=[Mistake("added", "you added 2 instead of doubling.", "multiply", lambda x: x + 2)],
    hint="2 * x",
)


def test_correct():
    fb = EX.check(lambda x: x * 2)
    assert fb.passed and fb.status == "correct" and bool(fb)


def test_not_attempted():
    def stub(x):
        raise NotImplementedError

    fb = EX.check(stub)
    assert fb.status == "not attempted" and not fb.passed
    assert "not attempted yet" in repr(fb)


def test_named_mistake():
    fb = EX.check(lambda x: x + 2)
    assert fb.mistake == "added" and "added 2" in fb.message


def test_error_is_reported_not_raised():
    def broken(x):
        return x @ torch.ones(5)

    fb = EX.check(broken)
    assert fb.status == "error" and "RuntimeError" in fb.message and "arange(3)" in fb.message


def test_wrong_shape_and_values():
    assert "wrong shape" in EX.check(lambda x: x[:2] * 2).message
    fb = EX.check(lambda x: x * 3)
    assert "wrong values" in fb.message and "index (2,)" in fb.message


def test_not_callable():
    fb = EX.check(torch.arange(3.0))
    assert fb.status == "error" and "expected a function" in fb.message


def test_inputs_are_copied_between_calls_and_an_edit_in_place_is_named():
    """Each call gets its own copy (an edit cannot leak into the next case or the reference), and
    a right answer that changed its input in place is told so: the caller's tensor changed."""
    def mutating(x):
        x.mul_(2)
        return x

    fb = EX.check(mutating)
    assert not fb.passed and fb.mistake == "edited_input_in_place" and "(argument 1)" in fb.message
    assert EX.check(lambda x: x.clone().mul_(2)).passed


def test_outputs_close_structures():
    a = torch.ones(2)
    assert outputs_close((a, 3), (a.clone(), 3.0))
    assert not outputs_close((a,), (a, a))
    assert not outputs_close(a, torch.ones(3))
    assert outputs_close(torch.tensor(5), 5)
    assert not outputs_close(True, 1) and not outputs_close(1, True)  # a bool is no int, either way
    assert outputs_close(True, True) and not outputs_close(False, True)


def test_nan_output_is_explained_not_raised():
    fb = EX.check(lambda x: torch.full((3,), float("nan")))
    assert fb.status == "wrong" and "NaN" in fb.message and "index (0,)" in fb.message
    fb = EX.check(lambda x: torch.tensor([0.0, float("inf"), 4.0]))
    assert "inf" in fb.message and "1 of 3" in fb.message


def test_missing_return_and_tuple_are_named():
    assert "forget `return`" in EX.check(lambda x: None).message
    fb = EX.check(lambda x: (2 * x, x))
    assert "one of them is right" in fb.message
    assert "you returned" in EX.check(lambda x: (x, x)).message


def test_tuple_answers_say_which_element_differs():
    pair = Exercise(
        title="pair",
        reference=lambda x: (x, 2 * x),
        make_cases=lambda: [Case((torch.arange(3.0),))],
    )
    fb = pair.check(lambda x: (x, 3 * x))
    assert "element 1" in fb.message and "wrong values" in fb.message
    assert "element 0" in pair.check(lambda x: (x[:2], 2 * x)).message


def test_right_values_in_a_list_are_named():
    fb = EX.check(lambda x: [0.0, 2.0, 4.0])
    assert "values are right" in fb.message and "list" in fb.message


def test_an_uncomparable_answer_is_reported_not_raised():
    fb = EX.check(lambda x: (2 * x).to_sparse())
    assert not fb.passed


# -- issue 11 item 8: only the stub's own bare raise is "not attempted" -------------------
def test_not_implemented_from_real_code_is_an_error_not_not_attempted():
    def helper(x):
        raise NotImplementedError

    def calls_a_helper(x):
        return helper(x)

    def raises_with_a_message(x):
        raise NotImplementedError("complex inputs are not supported")

    fb = EX.check(calls_a_helper)
    assert fb.status == "error" and "NotImplementedError" in fb.message and "helper" in fb.message
    fb = EX.check(raises_with_a_message)
    assert fb.status == "error" and "complex inputs" in fb.message


def test_the_nbgrader_stub_is_not_attempted():
    namespace: dict = {}
    exec("def answer(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n", namespace)
    assert EX.check(namespace["answer"]).status == "not attempted"


def test_exits_from_the_learners_function_do_not_escape():
    import sys

    def exits(x):
        sys.exit(3)

    def interrupted(x):
        raise KeyboardInterrupt

    fb = EX.check(exits)
    assert fb.status == "error" and "sys.exit()" in fb.message
    fb = EX.check(interrupted)
    assert fb.status == "error" and "KeyboardInterrupt" in fb.message


def test_wording_of_a_returned_tuple():
    fb = EX.check(lambda x: (x, x))
    assert "expected a tensor of shape (3,)" in fb.message and "one a tensor" not in fb.message


# -- assert_passed: the autograder's form of a check --------------------------------------
def test_assert_passed_prints_and_passes_quietly(capsys):
    EX.check(lambda x: 2 * x).assert_passed()
    assert capsys.readouterr().out.startswith("✅ double: correct")


def test_assert_passed_raises_with_the_named_mistake_under_nbgrader(capsys, monkeypatch):
    import pytest

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError, match="added 2 instead of doubling"):
        EX.check(lambda x: x + 2).assert_passed()
    assert "added 2 instead of doubling" in capsys.readouterr().out

    def stub(x):
        raise NotImplementedError

    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(AssertionError, match="not attempted yet"):
        EX.check(stub).assert_passed()


def test_assert_passed_only_prints_while_learning(capsys, monkeypatch):
    """Outside nbgrader (JupyterLab, Colab, Binder) a wrong or missing answer is printed and
    Run All goes on to the next cell."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)

    def stub(x):
        raise NotImplementedError

    EX.check(lambda x: x + 2).assert_passed()
    EX.check(stub).assert_passed()
    out = capsys.readouterr().out
    assert "added 2 instead of doubling" in out and "not attempted yet" in out


# -- integrity: an answer that delegates to the reference is named ------------------------
def _reference_double(x):
    return 2 * x


GUARDED = Exercise(
    title="guarded",
    reference=_reference_double,
    make_cases=lambda: [Case((torch.arange(3.0),))],
    forbidden=[torch.softmax, outputs_close],
)


def test_calling_the_reference_under_any_name_is_named():
    alias = _reference_double
    for answer in (_reference_double, lambda x: alias(x), lambda x: GUARDED.reference(x)):
        fb = GUARDED.check(answer)
        assert fb.mistake == "called_reference" and "_reference_double" in fb.message, fb
    assert GUARDED.check(lambda x: x + x).passed
    assert GUARDED.check_trusted(_reference_double).passed


def test_calling_a_forbidden_library_function_is_named():
    fb = GUARDED.check(lambda x: outputs_close(x, x) * 2 * x)
    assert fb.mistake == "called_reference" and "outputs_close" in fb.message
    fb = GUARDED.check(lambda x: torch.softmax(x, 0) * 0 + 2 * x)  # a builtin, seen too
    assert fb.mistake == "called_reference" and "softmax" in fb.message


def test_the_guard_restores_the_previous_profiler():
    import sys

    def profiler(frame, event, arg):
        return None

    sys.setprofile(profiler)
    try:
        GUARDED.check(lambda x: x + x)
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)


def test_every_library_twin_names_a_real_check_and_real_functions():
    import importlib

    from course_utils.exercises.core import LIBRARY_TWINS, _resolve

    for key, names in LIBRARY_TWINS.items():
        module, check = key.split(".")
        mod = importlib.import_module(f"course_utils.exercises.{module}")
        assert callable(getattr(mod, check, None)), f"LIBRARY_TWINS: no check {key}"
        for name in names:
            assert _resolve(name) is not None, f"LIBRARY_TWINS[{key!r}]: {name} does not exist"


def test_a_wrapper_of_a_library_twin_is_named():
    from course_utils.attention.masks import to_torch_attn_mask, to_torch_key_padding_mask
    from course_utils.exercises import lesson04

    fb = lesson04.check_masks_for_torch(lambda a, k: (to_torch_attn_mask(a), to_torch_key_padding_mask(k)))
    assert fb.mistake == "called_reference" and "to_torch_attn_mask" in fb.message


def test_a_call_to_F_sdpa_is_named_by_its_public_name():
    import math

    import torch.nn.functional as F

    from course_utils.exercises import lesson04

    def with_sdpa(x, w_in, b_in, w_out, b_out, h):
        B, T, d = x.shape
        q, k, v = (t.view(B, T, h, d // h).transpose(1, 2) for t in (x @ w_in.T + b_in).split(d, -1))
        out = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(d // h))
        return out.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out
    feedback = lesson04.check_mha_forward(with_sdpa)
    assert "torch.nn.functional.scaled_dot_product_attention" in feedback.message
    assert "torch._C" not in feedback.message


# -- while learning: a time limit per call, no rerun after a stop, no complex answers --------
def test_an_answer_that_never_returns_is_stopped_with_the_limit_named(monkeypatch):
    from course_utils.exercises import lesson02

    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "0.5")
    calls = []

    def forever(q, k):
        calls.append(1)
        while True:
            pass

    fb = lesson02.check_attention_weights(forever)
    assert fb.status == "error" and fb.stopped and "more than 0.5 s" in fb.message
    assert len(calls) == 1  # the raising-slip diagnosis did not run it again


def test_an_answer_that_swallows_exceptions_is_still_stopped(monkeypatch):
    from course_utils.exercises import lesson04

    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "0.5")

    def stubborn(*args, **kwargs):
        while True:
            try:
                sum(range(10**6))
            except Exception:  # an answer's own `except Exception` cannot catch the time limit
                pass

    fb = lesson04.check_mha_forward(stubborn)
    assert fb.stopped and "more than 0.5 s" in fb.message


def test_an_interrupted_answer_is_not_run_again():
    from course_utils.exercises import lesson04

    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    for check in (lesson04.check_mha_forward, lesson04.check_masks_for_torch):
        calls.clear()
        fb = check(interrupted)
        assert fb.status == "error" and fb.stopped and "interrupted" in fb.message and len(calls) == 1


def test_the_time_limit_leaves_no_alarm_behind():
    import signal

    from course_utils.exercises import lesson03

    before = signal.getsignal(signal.SIGALRM)
    lesson03.check_score_macs(lambda seq_len, d_model, num_heads: 0)
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("make", [lambda x: x + 0j, lambda x: x.numpy() + 5j])
def test_a_complex_answer_is_named_not_passed(make):
    from course_utils.exercises import lesson03

    def complex_split(x, num_heads):
        *lead, T, d = x.shape
        return make(x.reshape(*lead, T, num_heads, d // num_heads).transpose(-3, -2))

    fb = lesson03.check_split_heads(complex_split)
    assert not fb.passed and "complex" in fb.message and "real" in fb.message


@pytest.mark.parametrize("build, names", [
    (lambda: outputs_close(1.0, 1.0, rtol=-1), "rtol"),
    (lambda: outputs_close(1.0, 1.0, atol=float("nan")), "atol"),
    (lambda: Exercise("t", make_cases=3), "make_cases"),
    (lambda: Exercise("t", make_cases=lambda: [], rtol=-1), "rtol"),
    (lambda: Exercise("t", make_cases=lambda: [], mistakes=["x"]), "mistakes"),
    (lambda: Case(args=[1, 2]), "args"),
    (lambda: Case(kwargs={1: 2}), "kwargs"),
    (lambda: Case(label=3), "label"),
    (lambda: Feedback("t", "maybe", "x"), "status must be one of 'correct'.*got str 'maybe'"),
    (lambda: Feedback("t", "wrong", None), "message must be a str"),
], ids=["rtol<0", "atol nan", "make_cases int", "Exercise rtol<0", "mistakes str", "args list",
        "kwargs int key", "label int", "Feedback status", "Feedback message None"])
def test_the_checker_refuses_its_own_bad_settings_by_name(build, names):
    # a negative tolerance matched nothing and a list of args was passed on as one argument:
    # both failed silently before (issue 38's battery)
    with pytest.raises((TypeError, ValueError), match=names):
        build()


def test_an_exercise_without_cases_passes_no_answer():
    # it said "correct on all 0 test cases" to any answer (battery 5)
    fb = Exercise("t", lambda: [], reference=lambda x: x).check(lambda x: x)
    assert fb.status == "error" and not fb.passed
    assert "no test cases" in fb.message and "<lambda>" in fb.message


def test_a_meta_tensor_answer_is_named_by_its_device():
    # "could not compare ... Cannot copy out of meta tensor" before (battery 5)
    fb = EX.check(lambda x: torch.empty(3, device="meta"))
    assert fb.status == "wrong" and "'meta' device" in fb.message and "no values" in fb.message
    assert "Expected a tensor of shape (3,)" in fb.message and "arange(3)" in fb.message
    fb = EX.check(lambda x: (x, torch.empty(3, device="meta")))
    assert fb.status == "wrong" and "'meta' device" in fb.message and "inside a tuple of 2" in fb.message


def test_outputs_close_names_what_it_cannot_compare():
    with pytest.raises(ValueError, match=r"got is a tensor of shape \(2,\).*'meta' device.*no values"):
        outputs_close(torch.ones(2, device="meta"), torch.ones(2))
    with pytest.raises(ValueError, match="expected is .*'meta' device"):
        outputs_close(torch.ones(2), torch.ones(2, device="meta"))

    class NoEq:
        def __eq__(self, other):
            raise RuntimeError("eq boom")

    with pytest.raises(TypeError, match="cannot compare got .*NoEq.*RuntimeError: eq boom"):
        outputs_close(NoEq(), NoEq())
    assert not outputs_close(NoEq(), 3) and not outputs_close(3, NoEq())
    nan = float("nan")
    assert outputs_close(nan, nan) and not outputs_close(nan, 1.0) and not outputs_close(1.0, nan)


@pytest.mark.parametrize("answer, said", [
    (lambda *a, **k: float("nan"), "got float nan"),
    (lambda *a, **k: torch.empty(2, device="meta"), "'meta' device"),
], ids=["nan", "meta"])
def test_a_constant_odd_answer_is_not_called_random(answer, said):
    # a NaN (NaN != NaN) and a meta tensor were read as "a different output each time: dropout"
    from course_utils.exercises import lesson07

    fb = lesson07.check_decode_step(answer)
    assert fb.status == "wrong" and said in fb.message and "random" not in fb.message


def test_a_right_answer_in_half_precision_or_widened_to_float64_is_named():
    half = EX.check(lambda x: (2 * x).half())
    assert half.status == "mistake" and half.mistake == "half_precision" and "torch.float16" in half.message
    wide = EX.check(lambda x: (2 * x).double())
    assert wide.status == "mistake" and wide.mistake == "widened_to_float64"
    assert "torch.float64" in wide.message and "torch.float32" in wide.message
    narrow = Exercise("t", reference=lambda x: 2 * x,
                      make_cases=lambda: [Case((torch.arange(3.0, dtype=torch.float64),))])
    assert narrow.check(lambda x: (2 * x).float()).passed  # float32 for a float64 answer: accepted


def test_an_in_place_edit_is_named_by_the_answers_own_parameter():
    def doubled_in_place(values):
        return values.mul_(2)

    fb = EX.check(doubled_in_place)
    assert fb.mistake == "edited_input_in_place" and "`values` (argument 1)" in fb.message
    assert "head outputs" not in fb.message and "x.clone()" in fb.hint


def test_a_name_never_defined_gets_a_hint_that_names_it():
    def with_numpy_alias(x):  # the grader rebuilds the exception from its text: no .name
        raise NameError("name 'np' is not defined")

    fb = EX.check(with_numpy_alias)
    assert fb.status == "error" and "NameError" in fb.message
    assert "`import numpy as np`" in fb.hint and fb.hint != EX.hint

    def misspelt(x):
        return 2 * X  # noqa: F821 - the slip under test

    fb = EX.check(misspelt)
    assert "`X`" in fb.hint and "spelling" in fb.hint and "import" not in fb.hint


def test_a_local_read_before_it_is_set_keeps_the_exercise_hint():
    def unbound(x):
        if x.sum() > 100:
            y = x
        return 2 * y

    fb = EX.check(unbound)
    assert fb.status == "error" and "UnboundLocalError" in fb.message and fb.hint == EX.hint
