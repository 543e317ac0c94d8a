"""Battery 28's final runs, commands and grading: each finding refused by name or put right."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

# an answer that ignores SIGALRM and sleeps past the limit, but less than the watchdog's half-second
# more: it came back late, was accepted, and was run again for the next case
IGNORES_THE_ALARM = """
import signal, time
import numpy as np
from course_utils.exercises import lesson02
def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
calls = []
def answer(x):
    calls.append(1)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(1.25)
    return softmax(x)
feedback = lesson02.check_softmax_rows(answer)
right = lesson02.check_softmax_rows(softmax)  # then a right answer passes: the alarm is back
print("RIGHT", right.status, flush=True)
print("STATUS", feedback.status, "CALLS", len(calls), flush=True)
print(feedback.message, flush=True)
"""


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="no SIGALRM here")
def test_an_answer_back_after_the_time_limit_is_stopped_and_never_run_again():
    env = {**os.environ, "COURSE_CHECK_TIMEOUT": "1", "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", IGNORES_THE_ALARM], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    right, first, message = done.stdout.split("\n", 2)
    assert right == "RIGHT correct" and first == "STATUS error CALLS 1", done.stdout
    assert "ran for more than 1 s" in message and "was stopped" in message, message


def test_exercise_6_2_passes_its_reference_under_a_float64_default_dtype():
    from course_utils.exercises import lesson06
    from solutions import lesson06 as s6

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        feedback = lesson06.GATE_IMPORTANCE.check_trusted(s6._importance_reference)
    finally:
        torch.set_default_dtype(previous)
    assert feedback.status == "correct", feedback.message


def test_safe_collect_outside_a_course_folder_collects_nothing_and_writes_nothing(tmp_path):
    (tmp_path / "exchange" / "c" / "inbound").mkdir(parents=True)
    here = tmp_path / "not_a_course"
    here.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "safe_collect.py"), "01_x", "--exchange",
                           str(tmp_path / "exchange"), "--course", "c", "--owner", "off"], cwd=here,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-800:])
    assert "expected nbgrader_config.py" in done.stderr and "nothing was collected" in done.stderr
    assert list(here.iterdir()) == []


def test_encode_stores_a_tensor_subclass_as_a_plain_tensor():
    from course_utils.exercises import answers

    class Marked(torch.Tensor):
        pass

    stored = answers.encode(torch.arange(3.0).as_subclass(Marked))["__tensor__"]
    assert type(stored) is torch.Tensor and stored.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("record", [{"__ndarray__": torch.ones(2), "dtype": "object"},
                                    {"__npscalar__": 3, "dtype": "O"},
                                    {"__npscalar__": 3, "dtype": "no such dtype"}])
def test_decode_refuses_a_stored_dtype_encode_never_writes(record):
    from course_utils.exercises import answers

    with pytest.raises(ValueError, match="must name a numeric dtype"):
        answers.decode(record)


def test_decode_refuses_a_store_nested_deeper_than_encode_writes():
    from course_utils.exercises import answers

    data: object = 1
    for _ in range(answers.MAX_DEPTH + 2):
        data = [data]
    with pytest.raises(ValueError, match="nested more than 32"):
        answers.decode(data)
    shallow: object = np.float32(2.5)
    for _ in range(answers.MAX_DEPTH):
        shallow = (shallow,)
    assert answers.decode(answers.encode(shallow)) == shallow


def test_a_right_answer_that_sets_other_environment_variables_passes_and_they_are_put_back(monkeypatch):
    """Only COURSE_* and NBGRADER_* steer the checks: others are put back without a word (torch
    sets TORCHINDUCTOR_CACHE_DIR when a right answer makes it import its compiler)."""
    from course_utils.exercises import lesson02

    monkeypatch.delenv("COURSE_CHECK_TIMEOUT", raising=False)

    def softmax(x):
        import os

        os.environ["SOME_LIBRARY_CACHE_DIR"] = "/tmp/x"
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    feedback = lesson02.check_softmax_rows(softmax)
    assert feedback.status == "correct", feedback.message
    assert "SOME_LIBRARY_CACHE_DIR" not in os.environ

    def tampers(x):
        import os

        os.environ["COURSE_CHECK_TIMEOUT"] = "0.0001"
        return softmax(x)

    feedback = lesson02.check_softmax_rows(tampers)
    assert not feedback.passed
    assert "os.environ['COURSE_CHECK_TIMEOUT'] from None to '0.0001'" in feedback.message, feedback.message
    assert "COURSE_CHECK_TIMEOUT" not in os.environ


def test_words_reads_a_list_whose_len_lies():
    from course_utils import cli

    class Lying(list):
        def __len__(self) -> int:
            return -1

    assert cli.words(Lying(["a", "b"])) == ["a", "b"]
    with pytest.raises(TypeError, match=r"argv\[1\] is int 3"):
        cli.words(Lying(["a", 3]))
