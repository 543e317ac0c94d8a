"""Battery 23 (issue 38), what fix53 left: path_patched_logits's ``outputs`` of other tokens,
a check held by an answer's slow ``__str__`` / ``__repr__``, an answer's own trace function left
installed, exercise_answers.py's traceback for a solutions module that raises at import, and
check_distinct's list of tensors."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from bad_input_cases import import_script, raises_naming

from course_utils.exercises import lesson07
from course_utils.interp.ablation import head_outputs
from course_utils.interp.patching import path_patched_logits
from course_utils.model.transformer import ModelConfig, TinyTransformer

ROOT = Path(__file__).resolve().parents[1]


# -- path_patched_logits compares the senders' outputs in `outputs` with its own run --------------
def _model_and_tokens():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2, num_layers=3))
    tokens = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(2))
    return model, tokens


@pytest.mark.parametrize("other", [lambda t: t.flip(1), lambda t: t.flip(0), lambda t: (t + 1) % 16],
                         ids=["positions reversed", "batch reversed", "other ids"])
def test_path_patching_refuses_outputs_of_other_tokens(other):
    """Battery 23: head outputs of other tokens were used silently (logits off by up to 0.047)."""
    model, tokens = _model_and_tokens()
    source = head_outputs(model, tokens.flip(0))
    raises_naming(ValueError, ["outputs", "L0H1", "other tokens"],
                  lambda: path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0), (2, 1)],
                                              outputs=head_outputs(model, other(tokens))))


def test_path_patching_takes_outputs_of_these_tokens_and_gives_the_same_logits():
    model, tokens = _model_and_tokens()
    source = head_outputs(model, tokens.flip(0))
    senders, receivers = [(0, 1), (1, 0)], [(2, 0), (2, 1)]
    given = path_patched_logits(model, tokens, source, senders, receivers,
                                outputs=head_outputs(model, tokens))
    computed = path_patched_logits(model, tokens, source, senders, receivers)
    torch.testing.assert_close(given, computed)


def test_path_patching_names_outputs_not_source_outputs_for_a_misshaped_outputs():
    model, tokens = _model_and_tokens()
    raises_naming(ValueError, ["outputs must be head_outputs(model, tokens)", "(3, 2, 2, 6, 4)"],
                  lambda: path_patched_logits(model, tokens, head_outputs(model, tokens), [(0, 1)], [(1, 0)],
                                              outputs=torch.zeros(3, 2, 2, 5, 4)))


# -- a check prints an answer's own objects under the time limit ----------------------------------
SLOW = """
import os, sys, time
os.environ["COURSE_CHECK_TIMEOUT"] = "1"
from course_utils.exercises import lesson02
class Slow(Exception):
    def __str__(self):
        time.sleep(60)
        return "late"
    __repr__ = __str__
{answer}
start = time.monotonic()
feedback = lesson02.check_softmax_rows(answer)
print("SECONDS", round(time.monotonic() - start))
print("STATUS", feedback.status)
print("MESSAGE", feedback.message)
"""


LIMIT = "could not be printed within the 1 s time limit"


@pytest.mark.parametrize("answer, said", [
    ("def answer(scores):\n    raise Slow()", f"a Slow that {LIMIT}"),
    ("def answer(scores):\n    raise ValueError(Slow())", f"a ValueError that {LIMIT}"),
    ("def answer(scores):\n    return Slow()", f"a Slow object (it {LIMIT})"),
    ("def answer(scores):\n    return [Slow()]", f"a list object (it {LIMIT})"),
], ids=["raises, slow __str__", "raises, holding a slow object", "returns, slow __repr__",
        "returns it in a list"])
def test_check_prints_an_answers_slow_object_within_the_time_limit(answer, said):
    """Battery 23: str()/repr() of the answer's objects ran outside the limit (121 s against 3 s).
    The subprocess timeout (a minute: every sleep is 60 s) only guards the test run."""
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(SLOW).replace("{answer}", answer)],
                         cwd=ROOT, capture_output=True, text=True, timeout=55)
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    assert lines["STATUS"] == "error" or lines["STATUS"] == "wrong", run.stdout
    assert said in lines["MESSAGE"], run.stdout
    assert int(lines["SECONDS"]) < 30, run.stdout  # once per formatting at most, never the 60 s sleep


def test_check_prints_plain_answers_as_before():
    """The plain path runs no limit and says what it said before."""
    from course_utils.exercises.core import _safe_str, describe_value
    assert describe_value({"a": 1}) == "dict {'a': 1}"
    assert describe_value([1, (2.0, "x")]) == "a list of 2 (int 1, a tuple of 2 (float 2.0, str 'x'))"
    assert _safe_str(ValueError("shape mismatch")) == "shape mismatch"
    assert _safe_str(KeyError("k")) == "'k'"


# -- the trace function is put back after a check -------------------------------------------------
def test_check_puts_back_the_trace_function_an_answer_installed():
    """Battery 23: an answer's own sys.settrace stayed installed after the check."""
    def tracer(*args):
        return None

    def repeat_kv(kv, num_heads):
        sys.settrace(tracer)
        return kv

    before = sys.gettrace()
    try:
        feedback = lesson07.check_repeat_kv(repeat_kv)
        after = sys.gettrace()
    finally:
        sys.settrace(before)
    assert after is before, f"the answer's trace function {after!r} is still installed"
    assert feedback.status == "wrong", feedback


# -- exercise_answers.py: a solutions module that raises at import is one line ---------------------
def test_exercise_answers_names_the_solutions_line_that_raised(monkeypatch, capsys):
    """Battery 23: ZeroDivisionError at import of solutions/lesson04.py printed a traceback."""
    script = import_script("exercise_answers")
    where = ROOT / "solutions" / "lesson04.py"
    code = compile("\n" * 9 + "def attach():\n    1 / 0\n", str(where), "exec")
    fake = types.ModuleType("solutions")
    exec(code, fake.__dict__)
    monkeypatch.setitem(sys.modules, "solutions", fake)
    monkeypatch.setattr(script, "compute", lambda: pytest.fail("built past a solutions module that raised"))
    assert script.main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "solutions/lesson04.py, line 11: ZeroDivisionError: division by zero" in err, err
    assert "no stored answer was written" in err, err


# -- check_distinct compares a list of tensors by their values ------------------------------------
def test_check_distinct_sees_a_repeated_tensor_in_a_list():
    """Battery 23: two equal tensors in a list were taken as distinct (== is elementwise)."""
    from course_utils.attention.validation import check_distinct
    raises_naming(ValueError, ["xs", "repeats", "[1, 2]"],
                  lambda: check_distinct([torch.tensor([1, 2]), torch.tensor([1, 2])], "xs"))
    assert len(check_distinct([torch.tensor([1, 2]), torch.tensor([1, 3]), torch.tensor(1)], "xs")) == 3
