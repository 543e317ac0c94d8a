"""Bad input to the grading of student work: course_utils.exercises.sandbox (run_answer, is_stub,
limits) and course_utils.exercises.autograde (grading notebooks, exercise_of), with the table-driven
grading checks. Notebooks that replay or look up the stored outputs, answers that cheat the
comparison, time out or ignore the alarm, and limits the system cannot take.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from bad_input_cases import ROOT, SCRIPTS, Case, LyingStr, assert_named, raises_naming

from course_utils import cli, paths
from course_utils.attention import shapes
from course_utils.attention import validation as V
from course_utils.attention import validation as va
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.shapes import parameter_table, trace_shapes
from course_utils.bench import decode_step, gqa_speed, memory, timing
from course_utils.bench import decode_step as DS
from course_utils.bench import gqa_speed as GS
from course_utils.bench import memory as MEM
from course_utils.bench import timing as TI
from course_utils.exercises import answers, autograde, lesson02, sandbox
from course_utils.exercises import answers as ANS
from course_utils.exercises import autograde as AG
from course_utils.exercises import sandbox as SB
from course_utils.exercises import your_attention as YA
from course_utils.exercises.your_attention import MAX_BATCH, causal_attention_with, run_with_your_attention
from course_utils.model import checkpoint, kv_cache
from course_utils.model import train as TRN
from course_utils.model import transformer as TF
from course_utils.model.checkpoint import checkpoint_paths
from course_utils.tasks import two_relations, worked_example
from course_utils.tasks import worked_example as WE
from course_utils.tasks.worked_example import load_worked_example

# -- battery 6 (left) --------------------------------------------------------------------------------

SOFTMAX = ("def softmax_rows(scores):\n    import numpy as np\n"
           "    return np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)\n")


def _mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = (x @ w_in.T + b_in).split(d, -1)
    q, k, v = (t.view(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-1, -2) / dk ** 0.5, -1) @ v
    return heads.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out


CASES = [
    # sandbox helpers: compile()'s TypeError, "Value after * must be an iterable", .splitlines
    Case("is_stub code=5", lambda: sandbox.is_stub(5, "f"), TypeError, ["code", "str", "int 5"]),
    Case("is_stub name=5", lambda: sandbox.is_stub("x = 1", 5), TypeError, ["name", "str", "int 5"]),
    Case("rules_broken code=5", lambda: sandbox.rules_broken(5, "lesson02.check_softmax_rows"),
         TypeError, ["code", "str", "int 5"]),
    Case("check_call 5", lambda: sandbox.check_call(5), TypeError, ["source", "str", "int 5"]),
    Case("hidden_paths 5", lambda: sandbox.hidden_paths(5), TypeError, ["extra", "list of folders", "int 5"]),
    Case("hidden_paths one str", lambda: sandbox.hidden_paths("/srv"), TypeError, ["extra", "'/srv'"]),
    Case("inputs_after 5", lambda: sandbox.inputs_after(5, {}), TypeError, ["args", "tuple", "int 5"]),
    Case("inputs_after kwargs list", lambda: sandbox.inputs_after((), []), TypeError,
         ["kwargs", "dict", "list"]),
    Case("run_answer case not a Case", lambda: sandbox.run_answer(
        SOFTMAX, "softmax_rows", "lesson02.check_softmax_rows", [[5]], sandbox=False),
         TypeError, ["case_sets", "Case", "int 5"]),
    Case("run_answer sandbox='yes'", lambda: sandbox.run_answer(
        SOFTMAX, "softmax_rows", "lesson02.check_softmax_rows", [[]], sandbox="yes"),
         TypeError, ["sandbox", "True or False", "'yes'"]),
    Case("run_answer hide=5", lambda: sandbox.run_answer(
        SOFTMAX, "softmax_rows", "lesson02.check_softmax_rows", [[]], hide=5, sandbox=False),
         TypeError, ["hide", "int 5"]),
    Case("run_answer max_result_bytes=0", lambda: sandbox.run_answer(
        SOFTMAX, "softmax_rows", "lesson02.check_softmax_rows", [[]], max_result_bytes=0, sandbox=False),
         ValueError, ["max_result_bytes", ">= 1", "0"]),
    # autograde: "No module named 'solutions'", raw TimeoutExpired, zip()'s ValueError, .cells
    Case("reference_outputs missing folder", lambda: autograde.reference_outputs("/nonexistent_b6/solutions",
                                                                                 "lesson02", 5),
         ValueError, ["solutions_dir", "/nonexistent_b6/solutions", "does not exist"]),
    Case("reference_outputs not named solutions", lambda: autograde.reference_outputs(str(SCRIPTS),
                                                                                      "lesson02", 5),
         ValueError, ["solutions_dir", "named 'solutions'", "scripts"]),
    Case("reference_outputs lesson99", lambda: autograde.reference_outputs(str(ROOT / "solutions"),
                                                                           "lesson99", 5),
         ValueError, ["lesson", "lesson02", "'lesson99'"]),
    Case("reference_outputs timeout=0", lambda: autograde.reference_outputs(str(ROOT / "solutions"),
                                                                            "lesson02", 5, timeout=0),
         ValueError, ["timeout", "(0, 86400)", "int 0"]),
    Case("reference_outputs salt='x'", lambda: autograde.reference_outputs(str(ROOT / "solutions"),
                                                                           "lesson02", "x"),
         TypeError, ["salt", "int", "'x'"]),
    Case("replay cases not Cases", lambda: autograde.replay("f", [1, 2], []), TypeError,
         ["cases", "Case", "[1, 2]"]),
    Case("replay one outcome short", lambda: autograde.replay(
        "f", lesson02.SOFTMAX_ROWS.cases()[:2], []), ValueError,
         ["outcomes", "one recorded outcome", "got 0"]),
    Case("result_cap 5", lambda: autograde.result_cap(5, []), TypeError, ["exercise", "Exercise", "int 5"]),
    Case("result_cap cases 5", lambda: autograde.result_cap(lesson02.SOFTMAX_ROWS, 5), TypeError,
         ["cases", "Case", "5"]),
    Case("neutralise_html 5", lambda: autograde.neutralise_html(5), TypeError, ["nb", "notebook", "int 5"]),
    Case("make_inert 5", lambda: autograde.make_inert(5), TypeError, ["nb", "notebook", "int 5"]),
    Case("configure None", lambda: autograde.configure(None, "."), TypeError, ["c", "config", "NoneType"]),
    Case("configure 5", lambda: autograde.configure(5, "."), TypeError, ["c", "config", "int 5"]),
    Case("configure root 5", lambda: autograde.configure({}, 5), TypeError, ["course_root", "path", "int 5"]),
    # answers store: torch's FileNotFoundError for an unknown lesson
    Case("stored lesson99", lambda: answers.stored("lesson99", "x"), ValueError,
         ["lesson", "lesson02", "'lesson99'"]),
    Case("stored name 5", lambda: answers.stored("lesson02", 5), TypeError, ["name", "str", "int 5"]),
    # lesson 4's payoff: an 80 GB allocation, "mat1 and mat2", "no attribute in_proj"
    Case("run_with_your_attention batch 10**7",
         lambda: run_with_your_attention(_mha_forward, batch_size=10**7),
         ValueError, ["batch_size", f"1..{MAX_BATCH}", "10000000"]),
    Case("causal_attention_with x width 8", lambda: causal_attention_with(
        _mha_forward, torch.randn(1, 3, 8), MultiHeadAttention(16, 4)), ValueError, ["x", "d_model=16", "8"]),
    Case("causal_attention_with x 2-D", lambda: causal_attention_with(
        _mha_forward, torch.randn(3, 16), MultiHeadAttention(16, 4)), ValueError, ["x", "3-D", "2-D"]),
    Case("causal_attention_with attn Linear", lambda: causal_attention_with(
        _mha_forward, torch.randn(1, 3, 16), torch.nn.Linear(2, 2)), TypeError,
         ["attn", "MultiHeadAttention", "Linear"]),
    Case("causal_attention_with fn 5", lambda: causal_attention_with(
        5, torch.randn(1, 3, 16), MultiHeadAttention(16, 4)), TypeError, ["fn", "int"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_battery6_leftovers_name_the_argument(case):
    assert_named(case)


def test_good_calls_still_pass():
    """The checks above refuse only what is wrong: the right arguments still work."""
    assert sandbox.is_stub("def f():\n    raise NotImplementedError\n", "f")
    assert sandbox.check_call("lesson02.check_softmax_rows(softmax_rows)") is not None
    assert sandbox.inputs_after((torch.ones(2),), {}) != [None]
    assert ROOT.resolve() in sandbox.hidden_paths([ROOT]) or ROOT.resolve() in [
        p for p in sandbox.hidden_paths([str(ROOT)])]
    cases = lesson02.SOFTMAX_ROWS.cases()
    assert isinstance(autograde.result_cap(lesson02.SOFTMAX_ROWS, cases), int)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("<b>x</b>")])
    assert autograde.neutralise_html(nb) == 1
    out = causal_attention_with(_mha_forward, torch.randn(1, 3, 16), MultiHeadAttention(16, 4))
    assert out.shape == (1, 3, 16)


def test_reference_outputs_past_its_timeout_says_so():
    """It raised subprocess.TimeoutExpired, whose message is the whole grader script."""
    autograde._REFERENCES.clear()
    with pytest.raises(RuntimeError, match=r"lesson02 took longer than timeout=0\.001 s"):
        autograde.reference_outputs(str(ROOT / "solutions"), "lesson02", 5, timeout=0.001)


def test_an_endless_recursion_is_not_called_a_refused_event():
    """It was reported as "refused: sys.setprofile (... threat model)", a cheating message for a
    learner's plain mistake: the interpreter switches the call watch off when the stack is full."""
    code = "def softmax_rows(scores):\n    return softmax_rows(scores)\n"
    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", code, "softmax_rows",
                                      salt=None, solutions_dir=None)
    text = str(feedback)
    assert not feedback and "setprofile" not in text and "refused" not in text
    assert "RecursionError" in text


def test_a_float64_mha_forward_is_named_not_the_hook():
    """It said "the hook at blocks.0.hook_attn_out must return ... float32", a name the learner
    never wrote."""
    report = run_with_your_attention(lambda *a, **k: _mha_forward(*a, **k).double(), batch_size=2)
    assert report.yours is None
    assert "your function returned dtype torch.float64" in report.error and "hook" not in report.error


def test_a_name_the_code_does_not_define_is_said_so():
    """It read "defining your function (and what it imports) raised KeyError: 'nope'", blaming
    the learner's code for the grader's lookup."""
    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", SOFTMAX, "nope",
                                      salt=None, solutions_dir=None)
    text = str(feedback)
    assert not feedback and "defines no function named 'nope'" in text and "KeyError" not in text


# -- battery 7 (ex) ----------------------------------------------------------------------------------

# -- rows 34-36, 18: the outside grader --------------------------------------------------------

# An answer that catches its own RecursionError: on Python 3.11 the catch runs and the answer is
# graded on what it returns; on 3.12 the grader reports the recursion itself (seen in the version
# run of 2026-11-29 with torch 2.13 and 2.15: the overflow reaches the call watch's profiler).
# Either way the answer fails for a true reason and nothing calls it a cheat.
_CAUGHT_RECURSION = "wrong values" if sys.version_info < (3, 12) else "called itself without end"


@pytest.mark.parametrize("code, said", [
    ("def f(x):\n    try:\n        return f(x)\n    except RecursionError:\n        return x\n",
     _CAUGHT_RECURSION),
    ("def f(x):\n    def r():\n        try: r()\n        except BaseException: r()\n    r()\n",
     "called itself without end"),
])
def test_the_grader_calls_a_recursion_no_refusal(code, said):
    from course_utils.exercises import autograde

    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", code, "f", salt=None,
                                      solutions_dir=None, per_call=5)
    text = str(feedback)
    assert not feedback.passed and said in text
    assert "refused" not in text and "setprofile" not in text


def test_the_grader_survives_an_answer_that_ends_its_process():
    """In the notebook os._exit() ends the kernel (nothing in-process can stop it); the outside
    grader runs the answer in its own process, which ends, and says so."""
    from course_utils.exercises import autograde, lesson02, sandbox

    cases = autograde.cases_of(lesson02.check_softmax_rows.__self__)
    run = sandbox.run_answer("import os\ndef f(x):\n    os._exit(7)\n", "f", "lesson02.check_softmax_rows",
                             [cases], per_call=5)
    assert run.outcomes == [] and run.lost is not None
    assert run.lost.startswith("the answer's process ended without results (exit status 7"), run.lost
    assert not run.lost.endswith("; )")


@pytest.mark.parametrize("cells", [3, "x = 1", [1, 2]])
def test_grading_preview_names_cells_that_are_not_code_cells(cells):
    from course_utils.exercises import sandbox

    said = sandbox.grading_preview(cells, "f", "lesson02.check_softmax_rows")
    assert len(said) == 1 and said[0].startswith("cells: expected the notebook's code cells"), said


# -- battery 9 ---------------------------------------------------------------------------------------

# -- 1. silent results --------------------------------------------------------------------------
# (call, error type, words the message must hold: the argument, what was expected, what arrived)
SILENT = [
    ("parameter_table duplicate head count", lambda: parameter_table(8, [2, 2]), ValueError,
     ["head_counts", "distinct", "[2, 2]", "repeats [2]"]),
    ("RatioSpread nan ratio", lambda: timing.RatioSpread("a", "b", math.nan, 1, 1, 1, 1, 3), ValueError,
     ["RatioSpread('a').median", "finite number > 0", "nan"]),
    ("RatioSpread 0 repeats", lambda: timing.RatioSpread("a", "b", 1.0, 1, 1, 1, 1, 0), ValueError,
     ["RatioSpread('a').repeats", "positive int", "got 0"]),
    ("make_read_probe empty buffer", lambda: decode_step.make_read_probe(torch.empty(0)), ValueError,
     ["buffer", "at least one number", "(0,)"]),
    ("random_buffer seed -1", lambda: decode_step.random_buffer(64, seed=-1), ValueError,
     ["seed", ">= 0", "-1"]),
    ("grading_note cells str", lambda: sandbox.grading_note("x = 1", "lesson02.check_softmax_rows"),
     TypeError, ["cells", "list of str", "str 'x = 1'"]),
    ("grading_note unknown check", lambda: sandbox.grading_note(["x = 1"], "bogus"), ValueError,
     ["check_key", "lessonNN.check_xxx", "'bogus'"]),
    ("ShapeTrace.format code str", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))
     .format(code="no"), TypeError, ["code", "True or False", "str 'no'"]),
    ("trace_shapes keep_tensors str", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8),
                                                           keep_tensors="yes"),
     TypeError, ["keep_tensors", "True or False", "str 'yes'"]),
    ("Table values vs row labels", lambda: worked_example.Table("t", np.ones((2, 2)), ("a",), ("b", "c")),
     ValueError, ["Table('t').values", "one row per row label", "(1, 2)", "(2, 2)"]),
    ("output_rounding_budget nan", lambda: worked_example.output_rounding_budget(
        np.full((2, 2), np.nan), np.ones((2, 2))), ValueError, ["weights", "finite", "nan at index (0, 0)"]),
    ("checkpoint_paths NUL", lambda: checkpoint_paths("ind\x00uction"), ValueError,
     ["name_or_path", "NUL", "'ind\\x00uction'"]),
    ("check_device cpu:3", lambda: va.check_device("cpu:3"), ValueError, ["device", "'cpu:3'", "use 'cpu'"]),
    ("check_distinct nan twice", lambda: va.check_distinct([math.nan, math.nan], "xs"), ValueError,
     ["xs", "distinct", "repeats [nan]"]),
    ("check_tensor_list one tensor", lambda: va.check_tensor_list(torch.ones(2, 2), "parts"), TypeError,
     ["parts", "list or tuple of tensors", "one tensor of shape (2, 2)"]),
    ("check_positive_number inf", lambda: va.check_positive_number(math.inf, "x"), ValueError,
     ["x", "finite number > 0", "inf"]),
    ("check_table duplicate columns", lambda: va.check_table(
        __import__("pandas").DataFrame([[1, 2]], columns=["a", "a"]), "t", ("a",)), ValueError,
     ["t", "distinct column names", "repeats ['a']"]),
    ("check_tensor sparse", lambda: va.check_tensor(torch.ones(2, 2).to_sparse(), "x", ndim=2), TypeError,
     ["x", "dense (strided)", "sparse_coo"]),
    ("check_edited_heads all NaN", lambda: va.check_edited_heads(torch.full((1, 2, 3, 4), math.nan),
                                                                  torch.ones(1, 2, 3, 4)),
     ValueError, ["edit_heads's result", "finite", "nan at index (0, 0, 0, 0)"]),
]


def _other_tasks_batch():
    model = two_relations.LookupModel(two_relations.TwoKeyTask(), 16, 2)
    batch = two_relations.TwoKeyTask(num_keys=40, num_items=8).sample(4, seed=0)
    return model(batch)


def _naive_without_a_head():
    from course_utils.attention.naive_mha import NaiveMultiHeadAttention

    naive = NaiveMultiHeadAttention(8, 2)
    del naive.heads[1]
    return naive.to_batched()


RAW = [
    ("dequantize_kv misfit scale", lambda: kv_cache.dequantize_kv(
        kv_cache.Quantized._make((torch.ones(1, 1, 2, 4, dtype=torch.int8), torch.ones(3), None))),
     ValueError, ["q.scale", "fit the codes (1, 1, 2, 4)", "got (3)"]),
    ("LookupModel other task's batch", _other_tasks_batch, ValueError,
     ["batch.item_keys", "keys in 0..15", "max 38", "not from the model's task"]),
    ("NaiveMHA.to_batched after del heads[1]", _naive_without_a_head, ValueError,
     ["heads", "num_heads=2", "got 1"]),
    ("make_read_probe clock=3", lambda: decode_step.make_read_probe(torch.ones(16), clock=3), TypeError,
     ["clock", "function of no arguments", "int 3"]),
    ("time_cold progress=3", lambda: gqa_speed.time_cold(
        {"a": lambda: 1}, baseline="a", repeats=2, warmup=0, progress=3), TypeError,
     ["progress", "a str", "int 3"]),
    ("format_spread_table title None", lambda: timing.format_spread_table(
        None, timing.time_interleaved({"a": lambda: 1}, baseline="a", repeats=3, warmup=0), "a"),
     TypeError, ["title", "a str", "NoneType None"]),
    ("peak_allocated_bytes fn of one argument", lambda: shapes.peak_allocated_bytes(lambda a: a),
     TypeError, ["fn", "no arguments", "<lambda>(a)"]),
    ("weight_on_keys None", lambda: two_relations.weight_on_keys(
        None, two_relations.TwoKeyTask().sample(4, seed=0)),
     TypeError, ["model", "LookupModel", "NoneType"]),
    ("recompute_from_article dict", lambda: worked_example.recompute_from_article({}), TypeError,
     ["example", "WorkedExample", "dict {}"]),
    ("output_rounding_budget lists", lambda: worked_example.output_rounding_budget([[1.0]], [[1.0]]),
     TypeError, ["weights", "2-D NumPy array", "list"]),
    ("path_kind None", lambda: paths.path_kind(None), TypeError,
     ["path", "str or Path", "NoneType"]),
    ("encode_case None", lambda: answers.encode_case(None), TypeError,
     ["case", "a Case", "NoneType"]),
    ("cases_signature 5", lambda: answers.cases_signature(5), TypeError,
     ["cases", "list of Case", "int 5"]),
    ("describe_shape list", lambda: va.describe_shape([1, 2]), TypeError,
     ["describe_shape", "tensor", "list"]),
    ("describe_shape None", lambda: va.describe_shape(None), TypeError,
     ["describe_shape", "tensor", "NoneType"]),
    ("check_holds_values None", lambda: va.check_holds_values(None, "x"), TypeError,
     ["x", "torch.Tensor", "NoneType"]),
    ("check_finite ndarray", lambda: va.check_finite(np.ones((2, 2)), "x"), TypeError,
     ["x", "torch.Tensor", "ndarray"]),
    ("check_same_dtype_and_device list", lambda: va.check_same_dtype_and_device([torch.ones(1)]), TypeError,
     ["tensors", "dict", "list"]),
    ("check_distinct lists", lambda: va.check_distinct([[1], [1]], "xs"), ValueError,
     ["xs", "distinct", "repeats [[1]]"]),
    ("check_tensor ndim -1", lambda: va.check_tensor(torch.ones(2), "x", ndim=-1), ValueError,
     ["ndim", "int >= 0", "-1"]),
    ("RelationsConfig values 'x'", lambda: two_relations.RelationsConfig(values="x"), ValueError,
     ["values", "'content' or 'tagged'", "'x'"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in (*SILENT, *RAW)],
                         ids=[f"silent-{c[0]}" for c in SILENT] + [f"raw-{c[0]}" for c in RAW])
def test_a_silent_result_or_raw_error_is_now_refused_by_name(call, error, words):
    """Battery 8's rows 11-16 (silent results) and 23 (raw Python errors): each call is refused
    with an error whose message holds every listed word."""
    with pytest.raises(error) as refused:
        call()
    message = str(refused.value)
    assert all(w in message for w in words), message


# -- battery 9 (checks) ------------------------------------------------------------------------------

# -- row 15: the grader's helpers name a bad argument ---------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda ag: ag.write_secrets(None, ["01_x"], "solutions"),
     "course must be a str or Path naming the course folder"),
    (lambda ag: ag.read_secrets(None), "course must be a str or Path naming the course folder"),
    (lambda ag: ag.read_secrets(""), "course must name the course folder nbgrader works in, got an empty"),
], ids=["write_secrets None", "read_secrets None", "read_secrets empty"])
def test_secrets_helpers_name_a_course_that_is_not_a_path(call, words):
    from course_utils.exercises import autograde

    with pytest.raises((TypeError, ValueError), match="course") as info:
        call(autograde)
    assert words in str(info.value), info.value


def test_a_numpy_int_salt_builds_the_same_cases_as_a_python_int():
    import numpy as np

    from course_utils.exercises import autograde

    exercise = autograde.exercise_of("lesson07", "check_merge_halves")  # (torch.Generator seeds)
    plain, numpy_int = autograde.cases_of(exercise, 7), autograde.cases_of(exercise, np.int64(7))
    assert len(plain) == len(numpy_int)
    for a, b in zip(plain, numpy_int, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a.args, b.args, strict=True))


def test_neutralise_html_names_a_cell_whose_source_is_a_list():
    import nbformat

    from course_utils.exercises import autograde

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("<b>ok</b>"),
                                         nbformat.v4.new_markdown_cell("x")])
    nb.cells[1].source = ["<img src=x ", "onerror=alert(1)>"]
    with pytest.raises(TypeError, match=r"nb\.cells\[1\]\.source is list"):
        autograde.neutralise_html(nb)
    assert nb.cells[0].source == "<b>ok</b>"  # nothing changed before the refusal


# -- battery 10 (checks) -----------------------------------------------------------------------------

# -- finding 2: an answer that replays the shipped stored answers ---------------------------------
_LOOKUP = '''
from course_utils.exercises import answers
S = answers.stored("lesson02", "SOFTMAX_ROWS")
CASES_ = [answers.decode(c["args"]) for c in S["cases"]]
EXP_ = [answers.decode(e) for e in S["expected"]]
'''


_LOOKUP_ANSWER = '''
def fn(s):  # no computation: the stored output whose stored input is this one
    for args, expected in zip(CASES_, EXP_):
        if args[0].shape == s.shape and (args[0] == s).all():
            return expected
    return EXP_[0]
'''


_REPLAY = '''
import itertools
from course_utils.exercises import answers
OUTS = itertools.cycle([answers.decode(e) for e in answers.stored("lesson03", "PARAMETER_COUNT")["expected"]])
'''


_REPLAY_ANSWER = '''
def fn(*args, **kwargs):  # the stored outputs in call order
    return next(OUTS)
'''


class _Shell:
    def __init__(self, cells):
        self.user_ns = {"In": cells}
        self.user_global_ns = self.user_ns


def _kernel(monkeypatch, cells):
    """Pretend to be an IPython kernel whose input history is ``cells``."""
    ipython = types.ModuleType("IPython")
    shell = _Shell(cells)
    ipython.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", ipython)


def test_a_lookup_of_the_stored_answers_read_in_an_earlier_cell_is_not_graded(monkeypatch):
    namespace: dict = {}
    exec(_LOOKUP + _LOOKUP_ANSWER, namespace)
    _kernel(monkeypatch, ["", _LOOKUP, _LOOKUP_ANSWER, "lesson02.check_softmax_rows(fn)"])
    feedback = lesson02.check_softmax_rows(namespace["fn"])
    assert not feedback.passed, feedback
    assert feedback.message.startswith("not graded: this kernel read the stored answers"), feedback
    assert "`answers`" in feedback.message


def test_a_replay_of_the_stored_outputs_in_call_order_is_not_graded(monkeypatch):
    from course_utils.exercises import lesson03

    namespace: dict = {}
    exec(_REPLAY + _REPLAY_ANSWER, namespace)
    _kernel(monkeypatch, ["", _REPLAY + _REPLAY_ANSWER, "lesson03.check_parameter_count(fn)"])
    feedback = lesson03.check_parameter_count(namespace["fn"])
    assert not feedback.passed and feedback.message.startswith("not graded"), feedback


@pytest.mark.parametrize("cell", ["answers = [1, 2]", "for answers in range(3):\n    pass",
                                  "note = 'my answers/notes'"])
def test_a_learners_own_variable_called_answers_is_no_read_of_the_store(monkeypatch, cell):
    """The kernel rule counts the store module, its readers and its files, not the word: an honest
    learner who calls a list `answers` (or writes the word in a string) is graded as usual."""
    from course_utils.exercises import lesson01, sandbox

    assert sandbox.store_reads([cell]) == []
    _kernel(monkeypatch, ["", cell, "lesson01.check_attend(attend)"])
    feedback = lesson01.check_attend(lambda scores, values: torch.softmax(scores, dim=-1) @ values)
    assert feedback.passed, feedback


def test_the_kernel_rule_is_the_graders_and_the_lessons_do_not_trip_it():
    from course_utils.exercises import sandbox

    broken = sandbox.rules_broken(_REPLAY + _REPLAY_ANSWER, "lesson03.check_parameter_count")
    assert "`answers` (the course's stored answers)" in broken, broken
    assert sandbox.store_reads([_LOOKUP]) and sandbox.store_reads(["open('answers/lesson02.pt', 'rb')"])
    import json

    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "student").glob("*.ipynb")):
        cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
                 if c["cell_type"] == "code"]
        assert sandbox.store_reads(cells) == [], notebook.name


# -- finding 5: the exercises' helpers name a bad argument -----------------------------------------
def _helper_calls():
    from course_utils.exercises import answers, raising, sandbox
    from course_utils.exercises.cases import Case

    return [
        ("read_store(5)", lambda: answers.read_store(5), TypeError, "path"),
        ("read_store(None)", lambda: answers.read_store(None), TypeError, "path"),
        ("decode_case(None)", lambda: answers.decode_case(None), TypeError, "data"),
        ("decode_case(5)", lambda: answers.decode_case(5), TypeError, "data"),
        ("describe_inputs(depth='3')", lambda: answers.describe_inputs(1, depth="3"), TypeError, "depth"),
        ("describe_inputs(depth=-1)", lambda: answers.describe_inputs(1, depth=-1), ValueError, "depth"),
        ("failed_operation(None, case)", lambda: raising.failed_operation(None, Case((1,))), TypeError, "fn"),
        ("failed_operation(fn, None)", lambda: raising.failed_operation(len, None), TypeError, "case"),
        ("requested_shape(5)", lambda: raising.requested_shape(5), TypeError, "args"),
        ("accept(depth='3')", lambda: sandbox.accept(1, depth="3"), TypeError, "depth"),
        ("to_plain(depth='3')", lambda: sandbox.to_plain(1, depth="3"), TypeError, "depth"),
        ("answer_source(cells=5)", lambda: sandbox.answer_source(5, "f"), TypeError, "cells"),
        ("answer_source(cells=None)", lambda: sandbox.answer_source(None, "f"), TypeError, "cells"),
        ("answer_source(name=None)", lambda: sandbox.answer_source(["def f():\n    pass\n"], None),
         TypeError, "name"),
    ]


@pytest.mark.parametrize("index", range(14), ids=[c[0] for c in _helper_calls()])
def test_the_exercise_helpers_name_a_bad_argument(index):
    label, call, kind, name = _helper_calls()[index]
    with pytest.raises(kind) as raised:
        call()
    assert str(raised.value).startswith(name), (label, raised.value)


# -- battery 12 --------------------------------------------------------------------------------------

NAN = float("nan")


# -- 1. result records: one shared check (validation.check_record) ------------------------------
RUN = YA.ModelRun(torch.zeros(1, 2, 3), 1.0, 1.0)  # a valid run, for the records that hold one


RECORD_CASES = [
    Case("AttentionMacs/neg", lambda: shapes.AttentionMacs(-3, 3, 3, 3), ValueError,
         ["AttentionMacs.qkv_projections", "int >= 0", "-3"]),
    Case("AttentionMacs/str", lambda: shapes.AttentionMacs(3, "3", 3, 3), TypeError,
         ["AttentionMacs.scores", "int", "str '3'"]),
    Case("AttentionMacs/none", lambda: shapes.AttentionMacs(3, 3, None, 3), TypeError,
         ["AttentionMacs.attend", "int", "NoneType"]),
    Case("AttentionMacs/nan", lambda: shapes.AttentionMacs(3, 3, 3, NAN), TypeError,
         ["AttentionMacs.output_projection", "int", "float nan"]),
    Case("ShapeTrace/sizes int", lambda: shapes.ShapeTrace(3), TypeError,
         ["ShapeTrace.sizes", "dict", "int 3"]),
    Case("ShapeTrace/diff bool", lambda: shapes.ShapeTrace({"B": 1}, max_abs_diff=True), TypeError,
         ["ShapeTrace.max_abs_diff", "real number", "bool True"]),
    Case("ShapeTrace/tensors", lambda: shapes.ShapeTrace({"B": 1}, tensors={"x": 3}), TypeError,
         ["ShapeTrace.tensors['x']", "Tensor", "int 3"]),
    Case("StepRow/bool", lambda: DS.StepRow(True, 16, 1, 3, 3), TypeError,
         ["StepRow.batch", "int", "bool True"]),
    Case("StepRow/str", lambda: DS.StepRow(1, "3", 1, 3, 3), TypeError, ["StepRow.context", "str '3'"]),
    Case("StepRow/sample neg", lambda: DS.StepRow(1, 3, 1, 3, 3, [0.1, -1.0]), ValueError,
         ["StepRow.samples_s[1]", "> 0", "-1.0"]),
    Case("DecodeRow/bool", lambda: GS.DecodeRow(1, True), TypeError, ["DecodeRow.cache_bytes", "bool"]),
    Case("DecodeRow/samples nan", lambda: GS.DecodeRow(1, 3, {"sdpa": [NAN]}), ValueError,
         ["DecodeRow.samples_s['sdpa'][0]", "finite", "nan"]),
    Case("DecodeRow/samples list", lambda: GS.DecodeRow(1, 3, [0.1]), TypeError,
         ["DecodeRow.samples_s", "dict", "list"]),
    Case("NotebookMemory/str", lambda: MEM.NotebookMemory("x", "0.1", 1.0), TypeError,
         ["NotebookMemory.peak_mb", "real number", "str '0.1'"]),
    Case("NotebookMemory/neg", lambda: MEM.NotebookMemory("x", 0.1, -1.0), ValueError,
         ["NotebookMemory.seconds", ">= 0", "-1.0"]),
    Case("NotebookMemory/cells", lambda: MEM.NotebookMemory("x", 0.1, 1.0, cells="abc"), TypeError,
         ["NotebookMemory.cells", "list of CellTime", "str 'abc'"]),
    Case("NotebookMemory/cells bools", lambda: MEM.NotebookMemory("x", 0.1, 1.0, cells=[True]), TypeError,
         ["NotebookMemory.cells[0]", "CellTime", "bool True"]),
    Case("NotebookMemory/error", lambda: MEM.NotebookMemory("x", 0.1, 1.0, error=None), TypeError,
         ["NotebookMemory.error", "str", "NoneType"]),
    Case("CellTime/bool", lambda: MEM.CellTime(True, 0.5, "x"), TypeError, ["CellTime.index", "bool"]),
    Case("CellTime/nan", lambda: MEM.CellTime(1, NAN, "x"), ValueError,
         ["CellTime.seconds", "finite", "nan"]),
    Case("History/task", lambda: TRN.History(task=5), TypeError, ["History.task", "str", "int 5"]),
    Case("History/steps str", lambda: TRN.History("t", steps="3"), TypeError,
         ["History.steps", "list of int", "str '3'"]),
    Case("History/loss nan", lambda: TRN.History("t", loss=[NAN]), ValueError,
         ["History.loss[0]", "finite", "nan"]),
    Case("ModelRun/accuracy", lambda: YA.ModelRun(torch.zeros(1, 2, 3), "x", 1.0), TypeError,
         ["ModelRun.accuracy", "real number", "str 'x'"]),
    Case("ModelRun/logits none", lambda: YA.ModelRun(None, 1.0, 1.0), TypeError,
         ["ModelRun.logits", "Tensor", "NoneType"]),
    Case("ModelRun/logits 1-D", lambda: YA.ModelRun(torch.zeros(3), 1.0, 1.0), ValueError,
         ["ModelRun.logits", "3-D", "(3)"]),
    Case("ModelRun/logits meta", lambda: YA.ModelRun(torch.zeros(1, 2, 3, device="meta"), 1.0, 1.0),
         ValueError, ["ModelRun.logits", "meta"]),
    Case("SwapReport/tokens", lambda: YA.SwapReport(None, "ab", torch.ones(1, 2), RUN, None),
         TypeError, ["SwapReport.tokens", "Tensor", "str 'ab'"]),
    Case("SwapReport/yours", lambda: YA.SwapReport(None, torch.zeros(1, 2), torch.ones(1, 2), RUN, "x"),
         TypeError, ["SwapReport.yours", "ModelRun", "str 'x'"]),
    Case("Outcome/kind", lambda: SB.Outcome(5), ValueError,
         ["Outcome.kind", "'value', 'raised', 'refused', 'lost'", "int 5"]),
    Case("Outcome/stub", lambda: SB.Outcome("value", stub="yes"), TypeError,
         ["Outcome.stub", "True or False", "str 'yes'"]),
    Case("Outcome/error", lambda: SB.Outcome("raised", error=None), TypeError,
         ["Outcome.error", "tuple (str, str)", "NoneType"]),
    Case("Outcome/used", lambda: SB.Outcome("value", used=b"x"), TypeError, ["Outcome.used", "bytes"]),
    Case("Outcome/inputs_after str", lambda: SB.Outcome("value", inputs_after="ab"), TypeError,
         ["Outcome.inputs_after", "list", "str 'ab'"]),
    Case("Outcome/inputs_after int item", lambda: SB.Outcome("value", inputs_after=[5]), TypeError,
         ["Outcome.inputs_after[0]", "Tensor", "ndarray", "int 5"]),
    Case("Outcome/inputs_after list of str", lambda: SB.Outcome("value", inputs_after=[["x"]]), TypeError,
         ["Outcome.inputs_after[0]", "a list of", "list ['x']"]),
    Case("Run/outcomes", lambda: SB.Run(None), TypeError, ["Run.outcomes", "list", "NoneType"]),
    Case("Run/defined", lambda: SB.Run([], defined=5), TypeError, ["Run.defined", "tuple", "int 5"]),
    Case("Raised/kind", lambda: ANS.Raised(5, "m"), TypeError, ["Raised.kind", "str", "int 5"]),
    Case("RatioSpread/baseline", lambda: TI.RatioSpread("x", None, 1.0, 0.9, 1.1, 0.8, 1.2, 1), TypeError,
         ["RatioSpread.baseline", "str", "NoneType"]),
]


@pytest.mark.parametrize("case", RECORD_CASES, ids=lambda c: c.name)
def test_result_records_refuse_bad_fields(case):
    assert_named(case)


def test_result_records_keep_valid_values():
    """NumPy numbers, None where the annotation allows it, and the NaN a field documents still go in."""
    assert shapes.AttentionMacs(np.int64(3), 3, 0, 3).total == 9
    assert math.isnan(shapes.ShapeTrace({"B": 1}).max_abs_diff)  # not compared yet
    assert DS.StepRow(1, 16, 1, 3, 64, [np.float64(0.5), 1]).best_s == 0.5
    failed = MEM.NotebookMemory("x", None, 0.5, "RuntimeError: x", [MEM.CellTime(0, 0.1, "")])
    assert failed.verdict == "not measured"
    history = TRN.History("t", eval_steps=[1], eval_metrics=[{"acc": NAN, "logit_diff": -1.0}],
                          target_metric="logit_diff", target=-0.5)
    assert history.metric("logit_diff") == [-1.0]
    assert math.isnan(YA.ModelRun(torch.zeros(1, 2, 3), 0.5, NAN).loss)  # a learner's NaN output
    after = [torch.ones(2), np.zeros(2), [torch.ones(1)], None]
    assert SB.Outcome("value", inputs_after=after).inputs_after is after
    forged = SB._outcome({"kind": "value", "value": 1, "after": [5, "x", [1], {"__tensor__": torch.ones(2)}]})
    assert forged.inputs_after[:3] == [None, None, None]  # what the answer's process forged: dropped
    assert torch.equal(forged.inputs_after[3], torch.ones(2))
    run = SB.Run([[SB.Outcome("raised", error=["ValueError", "m"])]], lost=None)
    assert run.outcomes[0][0].kind == "raised"


# -- 9. describe_device, Block(config), head_sets, subject_position, check_rows/check_ids bounds --
HELPER_CASES = [
    *(Case(f"describe_device/{v!r}", lambda v=v: V.describe_device(v), TypeError,
           ["describe_device needs a tensor", type(v).__name__]) for v in ([1, 2], None, "x")),
    *(Case(f"Block/{v!r}", lambda v=v: TF.Block(v), TypeError, ["config", "ModelConfig", type(v).__name__])
      for v in (5, None, "x")),
    Case("check_rows/size str", lambda: V.check_rows([0, 1], "rows", size="3"), TypeError,
         ["check_rows's size", "int", "str '3'"]),
    Case("check_rows/size nan", lambda: V.check_rows([0, 1], "rows", size=NAN), TypeError,
         ["check_rows's size", "float nan"]),
    Case("check_ids/high str", lambda: V.check_ids(torch.tensor([1]), "ids", high="3"), TypeError,
         ["check_ids's high", "int", "str '3'"]),
    Case("check_ids/high nan", lambda: V.check_ids(torch.tensor([1]), "ids", high=NAN), TypeError,
         ["check_ids's high", "float nan"]),
    *(Case(f"check_tensor_list/stacked_ndim {v!r}",
           lambda v=v: V.check_tensor_list([torch.ones(2)], "parts", stacked_ndim=v), error,
           ["check_tensor_list's stacked_ndim (for parts)", repr(v)])
      for v, error in (("3", TypeError), (NAN, TypeError), (-3, ValueError), (True, TypeError))),
    Case("unseen_cases/salt None",
         lambda: AG.unseen_cases(AG.exercise_of("lesson02", "check_softmax_rows"), None), TypeError,
         ["salt", "int", "None"]),
    Case("same_raise/loose 1",
         lambda: ANS.same_raise(ANS.Raised("ValueError", "m"), "ValueError", "m", loose=1), TypeError,
         ["loose", "True or False", "int 1"]),
    Case("round_half_up/True", lambda: WE.round_half_up(True), TypeError, ["x", "number", "bool"]),
]


@pytest.mark.parametrize("case", HELPER_CASES, ids=lambda c: c.name)
def test_helpers_name_what_arrived(case):
    assert_named(case)


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13 silent: a negative salt (write_secrets makes them in 1..2**31 - 1) was used as given -----
def test_a_negative_salt_is_refused():
    from course_utils.exercises import autograde as AG

    exercise = AG.exercise_of("lesson02", "check_softmax_rows")
    for call in (lambda: AG.cases_of(exercise, -3), lambda: AG.unseen_cases(exercise, -3)):
        assert_named(Case("salt", call, ValueError, ["salt", "int >= 0", "-3"]))
    assert AG.unseen_cases(exercise, 3)  # the control


# -- b13: grading_preview(cells, 123, key) -> [] (no problem) for a name no answer can have --------
@pytest.mark.parametrize("name", [123, None, "", "not a name"], ids=repr)
def test_grading_preview_names_a_bad_name(name):
    from course_utils.exercises import sandbox as SB

    cells = ["def f(x):\n    return x\n"]
    problems = SB.grading_preview(cells, name, "lesson02.check_softmax_rows")
    assert len(problems) == 1 and "name" in problems[0] and repr(name)[:20] in problems[0], problems
    assert SB.grading_preview(cells, "f", "lesson02.check_softmax_rows") == []  # the control


# -- b13: grade_answer(salt=3, solutions_dir=None) graded without the unseen cases, without a word --
@pytest.mark.parametrize("salt, given, lacking", [(3, "salt=3", "solutions_dir=None"),
                                                  (None, "solutions_dir=", "salt=None")], ids=["salt", "dir"])
def test_grade_answer_wants_salt_and_solutions_dir_together(salt, given, lacking, tmp_path):
    from course_utils.exercises import autograde as AG

    folder = None if salt is not None else str(tmp_path)
    call = lambda: AG.grade_answer("lesson02", "check_softmax_rows", "def f(s):\n    return s\n", "f",
                                   # noqa: E731
                                   salt=salt, solutions_dir=folder)
    assert_named(Case("pair", call, ValueError, ["salt and solutions_dir go together", given, lacking]))


# -- b13 obscure: messages named another argument than the one given -----------------------------
def _wrong_name_cases():
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.attention.shapes import measured_macs
    from course_utils.env import pick_device
    from course_utils.exercises import sandbox as SBX
    from course_utils.exercises import your_attention as YA

    return [
        Case("pick_device prefer", lambda: pick_device("tpu"), ValueError, ["prefer must be", "'tpu'"]),
        Case("pick_device prefer int", lambda: pick_device(3), TypeError, ["prefer must be", "int"]),
        Case("train device", lambda: TRN.train_induction(steps=1, device="tpu"), ValueError,
             ["device must be", "'tpu'"]),
        Case("measured_macs x", lambda: measured_macs(MultiHeadAttention(8, 2), [1.0]), TypeError,
             ["x must be a torch.Tensor", "list"]),
        Case("hidden_paths extra", lambda: SBX.hidden_paths(3), TypeError, ["extra: expected a list", "int"]),
        Case("hidden_paths extra path", lambda: SBX.hidden_paths(Path("/tmp")), TypeError,
             ["extra: expected a list", "PosixPath"]),
        Case("run_with_your_attention checkpoint", lambda: YA.run_with_your_attention(lambda *a: None, 3),
             TypeError, ["checkpoint must be a str or Path", "int"]),
    ]


@pytest.mark.parametrize("case", _wrong_name_cases(), ids=lambda c: c.name)
def test_messages_name_the_argument_given(case):
    assert_named(case)


# -- b13 obscure: feedback_from(run=None) raised "'NoneType' object has no attribute 'lost'" -------
@pytest.mark.parametrize("run", [None, [], "run"], ids=repr)
def test_feedback_from_names_a_run_that_is_none(run):
    from course_utils.exercises import autograde as AG

    assert_named(Case("run", lambda: AG.feedback_from("lesson02", "check_softmax_rows", "f", run, []),
                      TypeError, ["run must be the answer's recorded run", type(run).__name__]))


# -- b13: read_secrets said "is missing" for a .course_grader.json that is a symlink loop ---------
def test_read_secrets_names_a_symlink_loop(tmp_path):
    import os

    from course_utils.exercises import autograde as AG

    secrets = tmp_path / AG.SECRETS_NAME
    os.symlink(tmp_path / "other", secrets)
    os.symlink(secrets, tmp_path / "other")
    assert_named(Case("loop", lambda: AG.read_secrets(tmp_path), ValueError, ["is a symlink loop", "source"]))
    (tmp_path / "other").unlink()
    secrets.unlink()
    assert_named(Case("missing", lambda: AG.read_secrets(tmp_path), FileNotFoundError, ["is missing"]))
    secrets.mkdir()
    assert_named(Case("folder", lambda: AG.read_secrets(tmp_path), ValueError, ["is a folder"]))


# -- battery 13b -------------------------------------------------------------------------------------

# --- grading: the grade_id, not the submitted source, says which check grades a test cell ----
TORCH_SOFTMAX = ("import torch\n\n\ndef softmax_rows(scores):\n    ### BEGIN SOLUTION\n"
           "    e = (scores - scores.max(dim=-1, keepdim=True).values).exp()\n"
           "    return e / e.sum(dim=-1, keepdim=True)\n    ### END SOLUTION\n")


STUB = "def attention_weights(q, k):\n    raise NotImplementedError('your code here')\n"


def _graded_cell(source: str, grade_id: str, *, test: bool) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": test, "grade_id": grade_id, "locked": test, "solution": not test,
                                 "schema_version": 3, **({"points": 1} if test else {})}
    return cell


def _submission(*cells: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=list(cells))


def test_a_test_cell_edited_to_call_another_exercises_check_gets_no_points():
    """b13 gradenb2:swap-check-to-easier-done-one: attention_weights' test cell, edited to call the
    (solved) softmax_rows check, gave lesson02_attention_weights_test (True, 'correct')."""
    from course_utils.exercises import autograde

    nb = _submission(_graded_cell(TORCH_SOFTMAX, "lesson02_softmax_rows", test=False),
                     _graded_cell(STUB, "lesson02_attention_weights", test=False),
                     _graded_cell("lesson02.check_softmax_rows(softmax_rows).assert_passed()",
                                  "lesson02_attention_weights_test", test=True))
    results = autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    feedback = results["lesson02_attention_weights_test"]
    assert not feedback.passed, str(feedback)
    assert "lesson02.check_softmax_rows" in str(feedback) and "released test cell" in str(feedback)
    assert nb.cells[2].outputs[0]["output_type"] == "error"


@pytest.mark.parametrize("grade_id, call", [
    ("lesson02_softmax_rows_test", "lesson02.check_softmax_rows"),
    ("lesson02_softmax_rows_2_test", "lesson02.check_softmax_rows"),
    ("lesson02_softmax_rows_test_2", "lesson02.check_softmax_rows"),
])
def test_a_test_cell_calling_its_own_check_is_its_exercise(grade_id, call):
    from course_utils.exercises import autograde, sandbox

    assert autograde._checks_its_own_exercise(grade_id, sandbox.check_call(f"{call}(f)"))
    assert not autograde._checks_its_own_exercise("lesson02_attention_weights_test",
                                                  sandbox.check_call(f"{call}(f)"))
    assert not autograde._checks_its_own_exercise("lesson03_softmax_rows_test",
                                                  sandbox.check_call(f"{call}(f)"))


def test_a_grade_id_on_two_cells_is_named():
    """b13 gradenb2:grade-id-dup-with-work: the second cell's verdict replaced the first's, no word."""
    from course_utils.exercises import autograde

    nb = _submission(_graded_cell(TORCH_SOFTMAX, "lesson02_softmax_rows", test=False),
                     _graded_cell("lesson02.check_softmax_rows(softmax_rows).assert_passed()",
                                  "lesson02_softmax_rows_test", test=True),
                     _graded_cell(STUB, "lesson02_attention_weights", test=False),
                     _graded_cell("lesson02.check_attention_weights(attention_weights).assert_passed()",
                                  "lesson02_softmax_rows_test", test=True))
    with pytest.raises(ValueError, match=r"cells 1 and 3 both carry grade_id 'lesson02_softmax_rows_test'"):
        autograde.grade_notebook(nb, salt=None, solutions_dir=None)


@pytest.mark.parametrize("cells, said", [
    (None, "it has no 'cells'"),
    ("x", "its 'cells' is str"),
])
def test_a_notebook_without_a_cells_list_says_what_is_missing(cells, said):
    """b13 gradenb:nb-no-cells-key / nb-cells-not-list: "got NotebookNode", the missing cells unnamed."""
    from course_utils.exercises import autograde

    nb = nbformat.v4.new_notebook()
    if cells is None:
        del nb["cells"]
    else:
        nb["cells"] = cells
    with pytest.raises(TypeError, match="cells") as raised:
        autograde.grade_notebook(nb, salt=None, solutions_dir=None)
    assert said in str(raised.value)


@pytest.mark.parametrize("salt, solutions_dir, said", [
    (3, None, "go together .* got salt=3 and solutions_dir=None"),
    (None, "SOLUTIONS", "go together .* got solutions_dir=.* and salt=None"),
])
def test_a_salt_without_its_solutions_folder_is_refused(salt, solutions_dir, said):
    """b13 grade-args:salt-without-dir: graded with "0 of them unseen", the salt ignored."""
    from course_utils.exercises import autograde

    folder = str(ROOT / "solutions") if solutions_dir else None
    with pytest.raises(ValueError, match=said):
        autograde.grade_answer("lesson02", "check_softmax_rows", TORCH_SOFTMAX, "softmax_rows", salt=salt,
                               solutions_dir=folder)


# -- battery 14 (fix44b) -----------------------------------------------------------------------------

# -- write_secrets: the course folder lies outside the clone (one test, cli.place_in) --------
@pytest.mark.parametrize("inside", [".", "battery/zzcourse"])
def test_write_secrets_refuses_a_course_inside_the_clone(inside, tmp_path):
    from course_utils.exercises import autograde

    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    (clone / "solutions").mkdir()
    (clone / "notebooks" / "02_single_head_attention.ipynb").write_text("{}")
    course = clone / inside
    with pytest.raises(ValueError, match=r"course: expected the nbgrader course folder outside"):
        autograde.write_secrets(course, ["02_single_head_attention"], clone / "solutions")
    assert not (course / autograde.SECRETS_NAME).exists()
    link = tmp_path / "link"  # a link into the clone is inside it too
    link.symlink_to(clone / "notebooks")
    with pytest.raises(ValueError, match=r"\(notebooks/ of the clone\)"):
        autograde.write_secrets(link, ["02_single_head_attention"], clone / "solutions")
    written = autograde.write_secrets(tmp_path / "course", ["02_single_head_attention"], clone / "solutions")
    assert written.is_file()


def test_write_secrets_blames_a_solutions_dir_without_notebooks_beside_it(tmp_path):
    from course_utils.exercises import autograde

    (tmp_path / "solutions").mkdir()
    with pytest.raises(FileNotFoundError) as info:
        autograde.write_secrets(tmp_path / "course", ["02_single_head_attention"], tmp_path / "solutions")
    message = str(info.value)
    assert message.startswith("solutions_dir:") and "holds no lesson notebooks" in message, message
    assert "lessons:" not in message


# -- install_audit_hook checks its arguments before it installs anything (for good) -----------
def _hook_cases():
    good = {"check_key": "lesson02.check_softmax_rows", "answer": compile("x = 1", "<answer>", "exec"),
            "harness": [True]}
    bad = [("work", None, TypeError, "NoneType None"), ("work", "", ValueError, "str ''"),
           ("work", b"x", TypeError, "bytes b'x'"), ("work", "zz_nonsense", ValueError, "'zz_nonsense'"),
           ("check_key", b"x", TypeError, "bytes b'x'"), ("check_key", ["x"], TypeError, "list ['x']"),
           ("check_key", "zz", ValueError, "str 'zz'"), ("answer", -1, TypeError, "int -1"),
           ("answer", "x", TypeError, "str 'x'"), ("harness", "yes", TypeError, "str 'yes'"),
           ("harness", 2, TypeError, "int 2"), ("harness", [1], TypeError, "list [1]")]
    return [(good, name, value, error, got) for name, value, error, got in bad]


@pytest.mark.parametrize("good, name, value, error, got", _hook_cases(), ids=lambda v: repr(v)[:20])
def test_install_audit_hook_names_a_bad_argument(good, name, value, error, got, tmp_path, monkeypatch):
    from course_utils.exercises import sandbox

    installed = []
    monkeypatch.setattr(sys, "addaudithook", installed.append)  # never install one in the test process
    arguments = {"work": str(tmp_path), **good, name: value}
    with pytest.raises(error) as info:
        sandbox.install_audit_hook(**arguments)
    message = str(info.value)
    assert message.startswith(f"{name}: expected") and got in message, message
    assert installed == []
    sandbox.install_audit_hook(**{"work": str(tmp_path), **good})  # the control: installs one
    assert len(installed) == 1


# -- result_cap: expected_unseen junk was ignored (the cap then left the unseen outputs out) ---
@pytest.mark.parametrize("junk, error, words", [
    (float("nan"), TypeError, "float nan"), (object(), TypeError, "object <object"),
    (-1, TypeError, "int -1"), ([], ValueError, "one right output per unseen case (3), got 0"),
])
def test_result_cap_names_expected_unseen_junk(junk, error, words):
    from course_utils.exercises import autograde, lesson02

    cases = autograde.cases_of(lesson02.SOFTMAX_ROWS)
    unseen = cases[:3]
    with pytest.raises(error) as info:
        autograde.result_cap(lesson02.SOFTMAX_ROWS, cases, unseen, junk)
    assert str(info.value).startswith("expected_unseen: expected") and words in str(info.value)


def test_result_cap_controls():
    from course_utils.exercises import autograde, lesson02

    cases = autograde.cases_of(lesson02.SOFTMAX_ROWS)
    plain = autograde.result_cap(lesson02.SOFTMAX_ROWS, cases)
    assert autograde.result_cap(lesson02.SOFTMAX_ROWS, cases, []) == plain  # no unseen cases: the same cap
    more = autograde.result_cap(lesson02.SOFTMAX_ROWS, cases, cases[:1], [cases[0].args[0]])
    assert more > plain


# -- battery 15 (fix45c) -----------------------------------------------------------------------------

# -- a NUL character in a path is refused by the one path rule, in every path-taking function ----
NUL = "/tmp/fix45c\0x"


PATH_CASES = [
    Case("check_path/str", lambda: paths.check_path(NUL, "where"), ValueError, ["where", "NUL", repr(NUL)]),
    Case("check_path/Path", lambda: paths.check_path(Path(NUL), "where"), ValueError, ["where", "NUL"]),
    Case("path_kind", lambda: paths.path_kind(NUL), ValueError, ["path", "NUL"]),
    Case("place_in/path", lambda: cli.place_in(NUL, "/tmp"), ValueError, ["path", "NUL"]),
    Case("place_in/root", lambda: cli.place_in("/tmp", NUL), ValueError, ["root", "NUL"]),
    Case("sha256_of", lambda: checkpoint.sha256_of(NUL), ValueError, ["path", "NUL"]),
    Case("available_checkpoints", lambda: checkpoint.available_checkpoints(NUL), ValueError,
         ["directory", "NUL"]),
    Case("load_checkpoint", lambda: checkpoint.load_checkpoint(NUL), ValueError, ["name_or_path", "NUL"]),
    Case("load_worked_example", lambda: load_worked_example(NUL), ValueError, ["path", "NUL"]),
    Case("read_store", lambda: answers.read_store(NUL), ValueError, ["path", "NUL"]),
    Case("read_secrets", lambda: autograde.read_secrets(NUL), ValueError, ["course", "NUL"]),
    Case("reference_outputs", lambda: autograde.reference_outputs(NUL, "lesson01", 1), ValueError,
         ["solutions_dir", "NUL"]),
    Case("hidden_paths", lambda: sandbox.hidden_paths([NUL]), ValueError, ["extra[0]", "NUL"]),
    Case("last_level_cache_bytes", lambda: decode_step.last_level_cache_bytes(NUL), ValueError,
         ["sysfs", "NUL"]),
    Case("read_notebook", lambda: memory.read_notebook(NUL), ValueError, ["path", "NUL"]),
    Case("read_test_report", lambda: memory.read_test_report(NUL), ValueError, ["path", "NUL"]),
]


@pytest.mark.parametrize("case", PATH_CASES, ids=lambda c: c.name)
def test_paths_with_a_nul_character_are_refused_by_name(case):
    assert_named(case)


# -- autograde.configure wants nbgrader's config, not a plain dict --------------------------------
def test_configure_refuses_a_plain_dict_naming_c():
    assert_named(Case("configure/plain dict", lambda: autograde.configure({}, "."), TypeError,
                      ["c", "nbgrader's config", "plain dict", "dict {}"]))


def test_configure_still_takes_a_traitlets_config(tmp_path):
    pytest.importorskip("nbgrader")
    from traitlets.config import Config

    c = Config()
    autograde.configure(c, tmp_path)
    assert c.GradeOutside.course_root == str(tmp_path.resolve())


# -- the sandbox's Refused says what was refused, where in the output, and what is taken ----------
REFUSED_CASES = [
    Case("to_plain/object in a list", lambda: sandbox.to_plain([1, object()]), sandbox.Refused,
         ["object", "output[1]", "plain data", "torch.Tensor"]),
    Case("to_plain/complex tensor deep", lambda: sandbox.to_plain(([torch.zeros(1, dtype=torch.complex64)],)),
         sandbox.Refused, ["complex64", "output[0][0]", "plain data"]),
    Case("to_plain/int key", lambda: sandbox.to_plain({"a": {1: 2}}), sandbox.Refused,
         ["key that is not a str", "output['a']", "str-keyed dicts"]),
    Case("accept/forged tensor", lambda: sandbox.accept([1, {"__tensor__": 3}]), sandbox.Refused,
         ["not a plain real tensor", "output[1]", "plain data"]),
    Case("accept/unknown dict", lambda: sandbox.accept({"__dict__": {"k": {"x": 1}}}), sandbox.Refused,
         ["['x']", "output['k']", "plain data"]),
]


@pytest.mark.parametrize("case", REFUSED_CASES, ids=lambda c: c.name)
def test_refused_outputs_are_named_with_their_place(case):
    assert_named(case)


def test_plain_outputs_still_come_back():
    value = {"a": [torch.arange(3.0), (1, "x", None)]}
    back = sandbox.accept(sandbox.to_plain(value))
    assert back["a"][1] == (1, "x", None) and torch.equal(back["a"][0], value["a"][0])


# -- battery 16 (fix46t) -----------------------------------------------------------------------------

# -- 4: the outside grader named torch.Storage for torch.set_default_dtype -----------------------
def test_the_grader_names_a_changed_default_dtype_not_torch_storage():
    from course_utils.exercises import sandbox

    snapshot = sandbox._modules_and_classes()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if before is not torch.float64 else torch.float32)
    try:
        changed = sandbox._changed(snapshot)
    finally:
        torch.set_default_dtype(before)
    assert changed is not None and "default dtype" in changed and "set_default_dtype" in changed
    assert "Storage" not in changed and str(before) in changed


def test_the_grader_still_names_a_replaced_module_attribute():
    from course_utils.exercises import sandbox

    snapshot = sandbox._modules_and_classes()
    original = torch.allclose
    torch.allclose = lambda *a, **k: True
    try:
        changed = sandbox._changed(snapshot)
    finally:
        torch.allclose = original
    assert changed == "`torch.allclose` changed"


# -- 9: sandbox.answer_source with a name that is not an identifier ------------------------------
@pytest.mark.parametrize("name", ["not an id", "", "1abc", "f()"])
def test_answer_source_names_a_name_that_is_not_an_identifier(name):
    from course_utils.exercises import sandbox

    with pytest.raises(ValueError) as info:
        sandbox.answer_source(["def f(): pass"], name)
    assert "name" in str(info.value) and "identifier" in str(info.value) and repr(name) in str(info.value)


def test_the_grader_answers_a_test_cell_whose_argument_is_not_a_name():
    import nbformat

    from course_utils.exercises import autograde

    answer = nbformat.v4.new_code_cell("def attend(q, k, v):\n    return q\n")
    answer.metadata["nbgrader"] = {"grade_id": "lesson01_attend", "solution": True, "grade": False}
    test = nbformat.v4.new_code_cell("lesson01.check_attend(1)")
    test.metadata["nbgrader"] = {"grade_id": "lesson01_attend_test", "grade": True, "solution": False,
                                 "points": 1}
    notebook = nbformat.v4.new_notebook(cells=[answer, test])
    results = autograde.grade_notebook(notebook, salt=None, solutions_dir=None)
    feedback = next(iter(results.values()))
    assert not feedback.passed and "identifier" in feedback.message and "'1'" in feedback.message


def test_the_answer_runs_on_the_package_the_grader_imported(tmp_path) -> None:
    """Graded from a checkout named by PYTHONPATH, the answer's process (``python -I``, which drops
    PYTHONPATH) imported the installed course_utils: other code than the grader's, or under
    bubblewrap (which shows only the grader's package folder) none, so every honest answer got
    "No module named 'course_utils'" (battery 16, re-run). It imports the grader's package now."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "course_utils", tmp_path / "course_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    child = tmp_path / "course_utils" / "exercises" / "sandbox.py"
    child.write_text(child.read_text() + (  # this copy's answer process says which code it is
        "\n\ndef _child(*args):\n"
        "    sys.stderr.write('refused: the answer ran on the grader copy\\n')\n"
        "    sys.stderr.flush()\n"
        "    os._exit(REFUSED_EXIT)\n"))
    code = ("from course_utils.exercises import autograde\n"
            "print(autograde.grade_answer('lesson03', 'check_parameter_count', "
            "'def parameter_count(d_model, h, bias=True):\\n    return 4 * d_model * d_model\\n', "
            "'parameter_count', salt=None, solutions_dir=None).message)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the answer ran on the grader copy" in done.stdout, done.stdout + done.stderr[-2000:]


# -- battery 18 (fix48u) -----------------------------------------------------------------------------

# -- 5: autograde.configure refuses a course_root that is not an existing folder ------------------
@pytest.mark.parametrize("kind, error", [("missing", FileNotFoundError), ("file", NotADirectoryError)])
def test_configure_refuses_a_course_root_that_is_no_folder(kind, error, tmp_path):
    from traitlets.config import Config

    from course_utils.exercises import autograde

    root = tmp_path / "course"
    if kind == "file":
        root.write_text("not a folder")
    c = Config()
    with pytest.raises(error) as info:
        autograde.configure(c, root)
    assert "course_root" in str(info.value) and str(root) in str(info.value)
    assert "GradeOutside" not in c  # nothing was set


# -- battery 19 (fix49t) -----------------------------------------------------------------------------

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


# -- battery 21 (fix51t) -----------------------------------------------------------------------------

def _notebook_with_cell_metadata(metadata):
    import nbformat

    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata = metadata
    return nbformat.from_dict({"cells": [nbformat.v4.new_markdown_cell("hi"), cell], "metadata": {},
                               "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize("metadata, where, shown", [
    ({"nbgrader": 5}, "metadata['nbgrader']", "int 5"),
    ({"nbgrader": "grade"}, "metadata['nbgrader']", "str 'grade'"),
    ({"nbgrader": [1]}, "metadata['nbgrader']", "list [1]"),
    ({"nbgrader": None}, "metadata['nbgrader']", "NoneType None"),
    (7, "metadata", "int 7"),
], ids=["int", "str", "list", "none", "metadata_int"])
def test_grade_notebook_refuses_non_dict_nbgrader_metadata(metadata, where, shown):
    from course_utils.exercises import autograde

    nb = _notebook_with_cell_metadata(metadata)
    raises_naming(ValueError, ["nb", f"cells[1].{where}", shown, "dict"],
                  lambda: autograde.grade_notebook(nb, salt=None, solutions_dir=None))
    raises_naming(ValueError, [f"cells[1].{where}", shown], lambda: autograde.make_inert(nb))


def _secrets(tmp_path, salts, solutions_dir=None):
    import json

    from course_utils.exercises import autograde

    data = {"salts": salts} if solutions_dir is None else {"salts": salts, "solutions_dir": solutions_dir}
    (tmp_path / autograde.SECRETS_NAME).write_text(json.dumps(data))
    (tmp_path / autograde.SECRETS_NAME).chmod(0o600)  # owner-only, as write_secrets makes it
    return autograde.SECRETS_NAME


@pytest.mark.parametrize("salt, shown", [
    ("abc", "str 'abc'"), (True, "bool True"), (1.5, "float 1.5"), (0, "int 0"), (-3, "int -3"),
    (2**31, f"int {2**31}"), (None, "NoneType None"),
], ids=["str", "bool", "float", "zero", "negative", "too_big", "none"])
def test_read_secrets_names_a_bad_salt(tmp_path, salt, shown):
    from course_utils.exercises import autograde

    name = _secrets(tmp_path, {"02_single_head_attention": salt})
    raises_naming(ValueError, [name, "salts['02_single_head_attention']", shown, "int"],
                  lambda: autograde.read_secrets(tmp_path))


def test_read_secrets_names_an_unknown_lesson(tmp_path):
    from course_utils.exercises import autograde
    from course_utils.paths import REPO_ROOT

    name = _secrets(tmp_path, {"02_single_head_attention": 5, "99_nope": 7}, str(REPO_ROOT / "solutions"))
    raises_naming(ValueError, [name, "'99_nope'", "notebooks"], lambda: autograde.read_secrets(tmp_path))


def test_read_secrets_keeps_a_good_file(tmp_path):
    from course_utils.exercises import autograde
    from course_utils.paths import REPO_ROOT

    _secrets(tmp_path, {"02_single_head_attention": 5}, str(REPO_ROOT / "solutions"))
    assert autograde.read_secrets(tmp_path)["salts"] == {"02_single_head_attention": 5}


@pytest.mark.parametrize("code, words", [
    ("async def softmax_rows(scores):\n    return scores\n", ["coroutine", "async def"]),
    ("def softmax_rows(scores):\n    yield scores\n", ["generator", "yield"]),
    ("async def softmax_rows(scores):\n    yield scores\n", ["async generator", "yield"]),
], ids=["async_def", "generator", "async_generator"])
def test_the_grader_names_an_answer_whose_call_does_not_run(code, words):
    from course_utils.exercises import autograde

    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", code, "softmax_rows", salt=None,
                                      solutions_dir=None, per_call=20)
    assert not feedback.passed
    assert all(w in feedback.message for w in words) and "tracemalloc" not in feedback.message, feedback


def test_to_plain_closes_a_coroutine_it_refuses():
    import warnings

    from course_utils.exercises import sandbox

    async def answer():
        return 1

    coroutine = answer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(sandbox.Refused, match="coroutine"):
            sandbox.to_plain(coroutine)
    assert coroutine.cr_frame is None  # closed: no "never awaited" warning when it is collected


# -- battery 22 (fix52t) -----------------------------------------------------------------------------

# -- notes: read_secrets on a secrets file others may read, or a link -------------------------------
def _good_secrets(folder):
    import json

    from course_utils.exercises import autograde

    path = folder / autograde.SECRETS_NAME
    path.write_text(json.dumps({"salts": {"02_single_head_attention": 5}}))
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_read_secrets_refuses_a_file_others_may_read(tmp_path, mode):
    from course_utils.exercises import autograde
    from tests.bad_input_cases import raises_naming

    path = _good_secrets(tmp_path)
    path.chmod(mode)
    raises_naming(ValueError, [str(path), f"{mode:04o}", "0600", "chmod 600"],
                  lambda: autograde.read_secrets(tmp_path))
    path.chmod(0o600)
    assert autograde.read_secrets(tmp_path)["salts"] == {"02_single_head_attention": 5}


def test_read_secrets_refuses_a_link_to_another_courses_secrets(tmp_path):
    from course_utils.exercises import autograde
    from tests.bad_input_cases import raises_naming

    other = tmp_path / "other"
    other.mkdir()
    target = _good_secrets(other)
    course = tmp_path / "course"
    course.mkdir()
    (course / autograde.SECRETS_NAME).symlink_to(target)
    raises_naming(ValueError, [str(course / autograde.SECRETS_NAME), "symbolic link", str(target)],
                  lambda: autograde.read_secrets(course))


# -- battery 22 (rerun) ------------------------------------------------------------------------------

NOT_IMPLEMENTED_STUB = "def f():\n    raise NotImplementedError\n"


@pytest.mark.parametrize("name", ["", "1f", "f g", "f()"])
def test_is_stub_refuses_a_name_no_function_can_have(name):
    raises_naming(ValueError, ["name", "identifier", repr(name)],
                  lambda: sandbox.is_stub(NOT_IMPLEMENTED_STUB, name))


def test_is_stub_still_reads_a_stub_and_an_answer():
    assert sandbox.is_stub(NOT_IMPLEMENTED_STUB, "f")
    assert not sandbox.is_stub("def f():\n    return 1\n", "f")


# -- battery 24 (fix54b) -----------------------------------------------------------------------------

# -- the outside grader ------------------------------------------------------------------------------
def test_grade_answer_refuses_a_negative_salt_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(autograde, "reference_outputs", lambda *a: pytest.fail("ran the reference"))
    raises_naming(ValueError, ["salt", ">= 0", "-1"],
                  lambda: autograde.grade_answer("lesson02", "check_softmax_rows",
                                                 "def f(s):\n    return s\n", "f", salt=-1,
                                                 solutions_dir=str(tmp_path)))


@pytest.mark.parametrize("value", [10**1000, -(10**700)], ids=["10**1000", "-10**700"])
def test_the_answers_process_refuses_an_int_it_could_not_send_back(value):
    """Battery 24: 10**1000 could not be read back (torch.load reads ints of 255 bytes at most),
    and the feedback said the process ended without results."""
    raises_naming(sandbox.Refused, ["int", "digits", "600"], lambda: sandbox.to_plain(value))
    assert sandbox.to_plain(10**300) == 10**300


# -- battery 27 (fix57) ------------------------------------------------------------------------------

# -- the outside grader refused right answers that seeded torch or used @torch.no_grad() ----------------
@pytest.mark.slow
@pytest.mark.parametrize("line", ["    torch.manual_seed(0)\n", "@torch.no_grad()\n",
                                  "@torch.inference_mode()\n"])
def test_the_grader_scores_a_right_answer_that_seeds_or_decorates(line: str) -> None:
    from course_utils.exercises import autograde

    body = "    return torch.softmax(scores, dim=-1) @ values\n"
    head = "def attend(scores, values):\n"
    code = "import torch\n" + (head + line + body if line.startswith("    ") else line + head + body)
    feedback = autograde.grade_answer("lesson01", "check_attend", code, "attend", salt=None,
                                      solutions_dir=None, per_call=30)
    assert feedback.passed, feedback.message


# -- battery 29 (commands) ---------------------------------------------------------------------------

# --- the grader takes an exact nn.Parameter as its plain tensor -----------------------------
def test_grader_takes_a_parameter_output_as_a_plain_tensor():
    """b29 parameter_output_passes_check_scores_zero: 4.2 answered `return nn.Parameter(torch.cat(...))`
    got "correct" from the check but 0 points from the grader (sandbox.to_plain refused the type)."""
    import torch

    from course_utils.exercises import sandbox

    weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    back = sandbox.accept(sandbox.to_plain((weight, [weight])))
    assert type(back[0]) is torch.Tensor and type(back[1][0]) is torch.Tensor
    assert torch.equal(back[0], weight.detach()) and not back[0].requires_grad

    class Odd(torch.nn.Parameter):  # still exact: a subclass is refused, whatever it is
        pass

    with pytest.raises(sandbox.Refused, match="Odd"):
        sandbox.to_plain(Odd(torch.zeros(2)))


# -- battery 29 (rerun) ------------------------------------------------------------------------------

def test_exercise_of_lesson_whose_repr_raises_named():
    """A str subclass whose repr raises is read as the plain str it holds (validation.plain_str),
    so the message shows its text rather than naming its broken repr."""
    from course_utils.exercises.autograde import exercise_of

    with pytest.raises(ValueError, match=r"lesson must be 'lessonNN', e\.g\. 'lesson02', got 'nope'$"):
        exercise_of(LyingStr("nope"), "check_x")


# -- battery 30 (dev) --------------------------------------------------------------------------------

def test_the_grader_runs_no_case_after_the_time_limit_struck():
    """After one call ran past per_call, every later case waited its full limit too (a 60 s
    sleep held autograde about 11 minutes per exercise, for 0 points). The cases after it are
    now not run, each recorded as stopped by the same limit: the answer is wrong either way."""
    from course_utils.exercises import autograde, lesson02, sandbox

    cases = autograde.cases_of(lesson02.check_softmax_rows.__self__)
    code = "def softmax_rows(s):\n    while True:\n        pass\n"
    run = sandbox.run_answer(code, "softmax_rows", "lesson02.check_softmax_rows", [cases, cases], per_call=1)
    kinds = [[o.kind for o in row] for row in run.outcomes]
    errors = [o.error for row in run.outcomes for o in row]
    assert kinds == [["raised"] * len(cases)] * 2, kinds
    assert errors[0] == ("TimeoutError", "the call took longer than the grader's time limit"), errors[0]
    later = [e for e in errors[1:]
             if e[0] != "TimeoutError" or not e[1].startswith("not run: an earlier call")]
    assert later == [], later


# -- battery 30 (e) ----------------------------------------------------------------------------------

def test_run_answer_refuses_limits_setrlimit_cannot_take():
    import pytest

    from course_utils.exercises import lesson02
    from course_utils.exercises.autograde import cases_of
    from course_utils.exercises.sandbox import run_answer

    code = "def softmax_rows(x):\n    return x\n"
    cases = [cases_of(lesson02.SOFTMAX_ROWS)]
    for name, value in (("memory", 10 ** 400), ("per_call", 2 ** 40), ("grace", 10 ** 30),
                        ("max_result_bytes", 10 ** 30)):
        with pytest.raises(ValueError, match=name):
            run_answer(code, "softmax_rows", "lesson02.check_softmax_rows", cases, sandbox=False,
                       **{"per_call": 30, name: value})


# -- a right answer that calls itself is not a ready-made twin ----------------------------------

_RECURSIVE_SPLIT_HEADS = '''import torch
def split_heads(x, num_heads):
    if x.dim() > 3:
        return torch.stack([split_heads(xi, num_heads) for xi in x])
    *lead, T, d = x.shape
    return x.reshape(*lead, T, num_heads, d // num_heads).transpose(-3, -2)
'''


def test_a_self_recursive_answer_is_not_refused_as_a_twin():
    # the grader refused it as "uses `split_heads` (a ready-made twin of this exercise)"
    assert SB.grading_preview([_RECURSIVE_SPLIT_HEADS], "split_heads", "lesson03.check_split_heads") == []
    assert SB.rules_broken(_RECURSIVE_SPLIT_HEADS, "lesson03.check_split_heads") == []


@pytest.mark.parametrize("reach", [
    "import torch\nimport course_utils.attention.mha as m\n"
    "def split_heads(x, h):\n    return m.split_heads(x, h)\n",
    "import torch\ndef split_heads(x, h):\n    return getattr(torch, 'split_heads')(x, h)\n",
])
def test_the_library_twin_reached_otherwise_is_still_refused(reach):
    # the control: the exemption is for a plain name of the answer's own function only
    assert any("twin" in p for p in SB.rules_broken(reach, "lesson03.check_split_heads"))
