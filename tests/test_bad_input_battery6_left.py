"""The last cases of battery 6 (issue 38) on the grader's side, the lesson-4 payoff, check 7.3
and two scripts: each bad call names the argument, what was expected and what arrived, and a
learner's mistake is told as that mistake (endless recursion, a generator, a float64 output)
rather than as a refused event, dropout or an internal hook."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.attention.mha import MultiHeadAttention
from course_utils.exercises import answers, autograde, lesson02, lesson07, sandbox
from course_utils.exercises.your_attention import MAX_BATCH, causal_attention_with, run_with_your_attention

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ("def softmax_rows(scores):\n    import numpy as np\n"
           "    return np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)\n")


def _script(name: str):
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_{name}_under_test_b6left", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


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
    Case("reference_outputs not named solutions", lambda: autograde.reference_outputs(str(ROOT / "scripts"),
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


def test_a_generator_answer_to_7_3_is_not_called_dropout():
    """Check 7.3 asked a generator answer twice, got two different generators and said "most
    likely dropout"; the other 24 checks say what came back."""
    def gen(*args):
        yield 1

    text = str(lesson07.check_decode_step(gen))
    assert "got generator" in text and "something random is on" not in text


def test_a_float64_mha_forward_is_named_not_the_hook():
    """It said "the hook at blocks.0.hook_attn_out must return ... float32", a name the learner
    never wrote."""
    report = run_with_your_attention(lambda *a, **k: _mha_forward(*a, **k).double(), batch_size=2)
    assert report.yours is None
    assert "your function returned dtype torch.float64" in report.error and "hook" not in report.error


def test_an_unreadable_student_copy_is_called_unreadable(tmp_path):
    """`nbgrader_tools.py check` called a student notebook that is not JSON "stale"."""
    pytest.importorskip("nbgrader")
    tools = _script("nbgrader_tools")
    nb = nbformat.v4.new_notebook()
    (tmp_path / "01_x.ipynb").write_text("{bad")
    nbformat.write(nb, tmp_path / "02_y.ipynb")
    unreadable: dict[str, str] = {}
    stale = tools.stale_students({"01_x.ipynb": nb, "02_y.ipynb": nb}, tmp_path, unreadable)
    assert stale == [str(tmp_path / "01_x.ipynb")]
    assert list(unreadable) == stale and "NotJSONError" in unreadable[stale[0]]


def test_a_failed_copy_of_the_student_tree_is_told_in_words(monkeypatch, capsys):
    """It printed the repr of shutil.Error's list of (source, target, why) tuples."""
    tree = _script("student_tree")
    failures = [("/src/a.pt", "/dst/a.pt", "[Errno 27] File too large: '/src/a.pt' -> '/dst/a.pt'"),
                ("/src/b.pt", "/dst/b.pt", "[Errno 27] File too large")]

    def build(out):
        raise shutil.Error(failures)

    monkeypatch.setattr(tree, "build", build)
    assert tree.main(["/nonexistent_b6/tree"]) == 2
    message = capsys.readouterr().err
    assert "could not copy 2 file(s)" in message and "/src/a.pt: [Errno 27] File too large" in message
    assert "[(" not in message


def test_a_name_the_code_does_not_define_is_said_so():
    """It read "defining your function (and what it imports) raised KeyError: 'nope'", blaming
    the learner's code for the grader's lookup."""
    feedback = autograde.grade_answer("lesson02", "check_softmax_rows", SOFTMAX, "nope",
                                      salt=None, solutions_dir=None)
    text = str(feedback)
    assert not feedback and "defines no function named 'nope'" in text and "KeyError" not in text
