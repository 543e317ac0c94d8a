"""The checks grade the same on every machine, and never copy an answer larger than the expected one.

The stored answers hold each exercise's test inputs themselves (``answers/lessonNN.pt``), so a
learner on another CPU (MKL's AVX2 or AVX-512 kernels, ATen's vectorised paths) is fed the
same bytes; outputs are compared with tolerances. CI also runs the exercise tests under
those code paths (``.ci/run``); the tests here hold the store's design on any one machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils.exercises import all_exercises, answers
from course_utils.exercises.core import Case

ROOT = Path(__file__).resolve().parent.parent


def test_the_check_feeds_the_stored_inputs_not_freshly_built_ones(monkeypatch):
    """A case builder whose float maths gives other last bits (another CPU) does not change
    what the learner's function is fed."""
    from course_utils.exercises import lesson02

    exercise = lesson02.ATTENTION_WEIGHTS
    stored = exercise.cases()
    built = exercise.make_cases

    def nudged():  # what another CPU path's matmul might give: one ulp off
        return [Case(tuple(torch.nextafter(a, torch.full_like(a, 1e9)) if isinstance(a, torch.Tensor)
                           and a.is_floating_point() else a for a in c.args), c.kwargs, c.label)
                for c in built()]

    monkeypatch.setattr(exercise, "make_cases", nudged)
    seen = []

    def spy(q, k):
        seen.append(q.clone())
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1)

    exercise.check(spy)
    assert len(seen) == len(stored)
    for got, case in zip(seen, stored, strict=True):
        assert torch.equal(got, case.args[0])


def test_every_lesson_exercise_stores_its_inputs_or_says_why_not():
    built_at_check_time = []
    for name, exercise in all_exercises().items():
        entry = answers.stored(*name.split("."))
        if entry["cases"] is None:
            built_at_check_time.append(name)
            assert any(callable(a) and not isinstance(a, torch.nn.Module) for c in exercise.make_cases()
                       for a in c.args)
        else:
            assert len(entry["cases"]) == len(entry["expected"]) == len(entry["signature"])
    assert built_at_check_time == ["lesson06.GATE_IMPORTANCE"]


def test_stored_inputs_round_trip_with_their_kinds():
    linear = torch.nn.Linear(3, 2).double()
    import pandas as pd

    table = pd.DataFrame([[0.5, 1.0], [0.25, 0.0]], index=["L0H0", "L0H1"], columns=["a", "b"])
    case = Case((torch.arange(4.0), np.arange(3.0), 7, linear, table), {"flag": True}, label="mixed")
    before = torch.random.get_rng_state()
    back = answers.decode_case(answers.encode_case(case))
    assert torch.equal(torch.random.get_rng_state(), before)  # decoding a Linear draws no random init
    assert back.label == "mixed" and back.kwargs == {"flag": True} and back.args[2] == 7
    assert torch.equal(back.args[0], case.args[0]) and np.array_equal(back.args[1], case.args[1])
    assert type(back.args[3]) is torch.nn.Linear and back.args[3].weight.dtype == torch.float64
    assert torch.equal(back.args[3].weight, linear.weight) and torch.equal(back.args[3].bias, linear.bias)
    assert back.args[4].equals(table)
    assert answers.encode_case(Case((lambda x: x,))) is None  # a function cannot be stored


def test_the_signature_ignores_float_bits_but_not_shapes():
    a = [Case((torch.tensor([0.1, 0.2]), 3), label="x")]
    b = [Case((torch.tensor([0.1, 0.2]).nextafter(torch.tensor(1.0)), 3), label="x")]
    c = [Case((torch.tensor([0.1, 0.2, 0.3]), 3), label="x")]
    assert answers.cases_signature(a) == answers.cases_signature(b)
    assert answers.cases_signature(a) != answers.cases_signature(c)


HUGE = textwrap.dedent('''
    import json, resource
    resource.setrlimit(resource.RLIMIT_DATA, (3 * 2**30, 3 * 2**30))  # 16 GB copies would fail
    import numpy as np, torch
    from course_utils.exercises import all_exercises, answers

    def huge_like(x):
        if isinstance(x, np.ndarray):
            return np.broadcast_to(np.zeros(1), (2**31,))
        if isinstance(x, torch.Tensor):
            return torch.zeros(1).expand(2**31)
        if isinstance(x, tuple):
            return tuple(huge_like(v) for v in x)
        return x

    found = {}
    for name, exercise in all_exercises().items():
        expected = answers.decode(answers.stored(*name.split("."))["expected"][0])
        answer = huge_like(expected)
        if repr(answer) == repr(expected):
            continue  # numbers or strings only: nothing to expand
        fb = exercise.check(lambda *a, _answer=answer, **k: _answer)
        found[name] = [fb.status, fb.message]
    print(json.dumps(found))
''')


def test_an_expanded_answer_of_2_to_the_31_entries_is_refused_by_shape_in_every_check():
    done = subprocess.run([sys.executable, "-c", HUGE], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert len(found) >= 18
    for name, (status, message) in found.items():
        assert status == "wrong" and "no values were compared" in message, (name, message)


@pytest.mark.parametrize("env", [{"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"},
                                 {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}],
                         ids=["compatible-default", "avx2"])
def test_the_store_is_current_on_another_cpu_path(env):
    """The store built on this machine's path is current under another (what an Intel laptop or
    an old CPU computes): cases agree to 1e-5, references to the checks' tolerance."""
    import os

    done = subprocess.run([sys.executable, "scripts/exercise_answers.py", "check"], capture_output=True,
                          text=True, cwd=ROOT, timeout=600, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_raised_slip_is_recognised_across_torch_versions():
    """torch 2.15 raises NotImplementedError where 2.13 raised RuntimeError for bool.mean(), and
    prefixes some messages with the operator ("mm: mat1 and mat2 ..."): both still match."""
    stored = answers.Raised("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (3x6 and 2x6)")
    newer = "mm: mat1 and mat2 shapes cannot be multiplied (3x6 and 2x6)"
    assert answers.same_raise(stored, "RuntimeError", newer)
    assert answers.same_raise(stored, "NotImplementedError", stored.message)
    assert not answers.same_raise(stored, "TypeError", stored.message)
    other_shapes = "mat1 and mat2 shapes cannot be multiplied (8x6 and 3x6)"
    assert not answers.same_raise(stored, "RuntimeError", other_shapes)


@pytest.mark.parametrize("kind, prefix", [(NotImplementedError, ""), (RuntimeError, "mean: ")])
def test_the_bool_mean_slip_is_named_as_newer_torch_raises_it(kind, prefix):
    from course_utils.exercises import lesson01

    def bool_mean_like_torch_2_15(*args, **kwargs):
        raise kind(prefix + "mean(): could not infer output dtype. Input dtype must be either a floating "
                   "point or complex dtype. Got: Bool")

    fb = lesson01.check_relation_accuracy(bool_mean_like_torch_2_15)
    assert fb.mistake == "bool_mean", fb


def test_rounding_at_a_near_zero_entry_is_judged_against_the_outputs_scale() -> None:
    """A matrix product's near-zero entry carries rounding of the size of the terms summed into it:
    3.8e-6 apart on an Intel CPU's AVX2 path and an AMD CPU for exercise 1.2's (5, 8) @ (8, 5)
    scores of size ~29. Judged entry by entry (1e-6 + 1e-5 * |entry|) that was "wrong"; against the
    output's scale it is right, and a real slip at that entry still is not."""
    from course_utils.exercises.core import outputs_close

    expected = torch.tensor([[28.649, -12.5], [0.1601, 3.0]])
    rounded = expected.clone()
    rounded[1, 0] += 3.8e-6
    slipped = expected.clone()
    slipped[1, 0] += 1e-2
    assert outputs_close(rounded, expected)
    assert outputs_close(rounded.numpy(), expected.numpy())
    assert not outputs_close(slipped, expected)
    assert not outputs_close(expected * 1.001, expected)
