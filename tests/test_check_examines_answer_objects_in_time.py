"""A check looks at what an answer returned or raised under the time limit of one call when it
is an object of the answer's own class: its ``__class__``, ``__len__``, ``__iter__``,
``__getitem__`` or ``__getattribute__`` runs whenever the check looks, and one that never returns
held the check forever (a probe after battery 23: nine of seventeen such answers hung).

One interpreter runs every case (imports once) with a 1 s limit; each slow method sleeps 60 s,
so a case that finishes at all was stopped, and the subprocess timeout only guards the test run.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

OBJECTS = {
    "slow __class__": """
        class Own:
            @property
            def __class__(self):
                time.sleep(60)
                return object
        made = Own()""",
    "list subclass, slow __len__": """
        class Own(list):
            def __len__(self):
                time.sleep(60)
                return 1
        made = Own([1])""",
    "tuple subclass, slow __iter__": """
        class Own(tuple):
            def __iter__(self):
                time.sleep(60)
                return iter(())
        made = Own((1,))""",
    "raised, slow __class__": """
        class Own(Exception):
            @property
            def __class__(self):
                time.sleep(60)
                return ValueError
        made, raise_it = Own("x"), True""",
    "raised, slow __getattribute__": """
        class Own(Exception):
            def __getattribute__(self, name):
                time.sleep(60)
                return object.__getattribute__(self, name)
        made, raise_it = Own("x"), True""",
}

# the checks whose own diagnoses run the answer again and look at what came back
CHECKS = ["lesson02.check_softmax_rows", "lesson03.check_parameter_count", "lesson04.check_masks_for_torch",
          "lesson07.check_decode_step"]

DRIVER = """
import json, os, sys, time
os.environ["COURSE_CHECK_TIMEOUT"] = "1"
import importlib
cases = json.loads(sys.argv[1])
for key, check, body in cases:
    raise_it = False
    exec(body)
    def answer(*args, _made=made, _raise=raise_it, **kwargs):
        if _raise:
            raise _made
        return _made
    module, name = check.split(".")
    start = time.monotonic()
    feedback = getattr(importlib.import_module("course_utils.exercises." + module), name)(answer)
    print(json.dumps([key, check, feedback.status, feedback.message, time.monotonic() - start]), flush=True)
"""


@pytest.fixture(scope="module")
def verdicts():
    cases = [[f"{kind} | {check}", check, "import time\n" + textwrap.dedent(body)]
             for kind, body in OBJECTS.items() for check in CHECKS]
    run = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], cwd=ROOT, capture_output=True,
                         text=True, timeout=50 * len(cases))
    assert run.returncode == 0, run.stderr[-3000:]
    return {key: (status, message, seconds)
            for key, _, status, message, seconds in map(json.loads, run.stdout.splitlines())}


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_check_stops_an_answers_slow_object_and_never_passes_it(verdicts, kind, check):
    status, message, seconds = verdicts[f"{kind} | {check}"]
    assert status in ("wrong", "error", "mistake"), (status, message)
    # a few 1 s limits at most, never the 60 s sleep (31.8 s under a load of 8 on 2 cores: the bound
    # says the sleep was cut short, not how fast the machine is)
    assert seconds < 50, (seconds, message)
    if "raised" in kind:
        assert "Own" in message, message
