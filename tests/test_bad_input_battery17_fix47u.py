"""Battery 17b's findings in the command-line helpers, parallel_map and the scripts (findings 2-7),
each failing before its fix."""

from __future__ import annotations

import signal
import time

import pytest

from course_utils import cli
from course_utils.parallel import parallel_map

# -- 2: a parallel_map job that ignores SIGTERM is killed soon after its timeout -----------------

def _ignores_sigterm(x: int) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)
    return x


def test_parallel_map_timeout_kills_a_job_that_ignores_sigterm():
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        parallel_map(_ignores_sigterm, [7], workers=1, timeout=1)
    took = time.monotonic() - started
    assert "items[0]" in str(info.value) and "timeout=1" in str(info.value)
    assert took < 15, f"the TimeoutError came after {took:.1f} s"


# -- 3: cli.run refuses an exit status of another type (a float read as 1 by sys.exit) ----------

@pytest.mark.parametrize("returned", [2.0, 0.0, [1], b"x"], ids=repr)
def test_run_refuses_a_status_that_is_not_an_int_none_or_str(returned):
    with pytest.raises(TypeError) as info:
        cli.run(lambda argv: returned, [], "p")
    message = str(info.value)
    assert "main(argv) returned" in message and repr(returned) in message
    assert type(returned).__name__ in message
