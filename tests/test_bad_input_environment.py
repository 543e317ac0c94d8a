"""Bad input to the environment helpers: course_utils.env (pick_device, check_seed, seed_everything,
gradients_on), course_utils.paths (check_path, deleted working folders) and course_utils.parallel
(parallel_map, MAX_JOBS). Devices that cannot run here, seeds and job counts of the wrong type or
size, and values whose repr raises.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import itertools
import multiprocessing
import re
import signal
import time

import pytest
import torch
from bad_input_cases import BadRepr, raises_naming

from course_utils import parallel, paths
from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.env import pick_device
from course_utils.parallel import parallel_map

# -- battery 7 (a) -----------------------------------------------------------------------------------

# a GPU index no machine here has: on a CPU-only torch "no usable CUDA GPU", else "only N GPU(s)"
MISSING_GPU = f"cuda:{torch.cuda.device_count() + 7}"


def test_a_missing_gpu_gets_pick_devices_sentence():
    """One sentence for one mistake: the masks say what pick_device says."""
    with pytest.raises(ValueError) as ours:
        causal_mask(3, device=MISSING_GPU)
    with pytest.raises(ValueError) as theirs:
        pick_device(MISSING_GPU, "device")  # named as the masks' argument (its own is prefer)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without MPS")
def test_an_absent_mps_gets_one_sentence():
    """pick_device and the masks share check_device_present: one sentence for MPS too."""
    with pytest.raises(ValueError) as ours:
        padding_mask([1, 2], device="mps")
    with pytest.raises(ValueError) as theirs:
        pick_device("mps", "device")  # named as the masks' argument (its own is prefer)
    assert str(ours.value) == str(theirs.value)
    assert "'mps' asked for" in str(theirs.value)


# -- battery 11 --------------------------------------------------------------------------------------

def test_check_seed_takes_numpy_ints_as_check_int_does():
    import numpy as np

    from course_utils.attention.validation import check_int
    from course_utils.env import check_seed

    for seed in (np.int64(7), np.uint8(7), np.int32(7)):
        assert check_seed(seed) == check_int(seed, "seed") == 7
        assert type(check_seed(seed)) is int
    with pytest.raises(ValueError, match="seed must be >= 0"):
        check_seed(np.int64(-1))


# -- battery 12 --------------------------------------------------------------------------------------

# -- 11. parallel_map with an endless or huge iterable -------------------------------------------
@pytest.mark.parametrize("items, shown", [(itertools.count(), "more (a count"),
                                          (range(10**13), "10,000,000,000,000")], ids=["endless", "huge"])
def test_parallel_map_refuses_too_many_jobs(items, shown):
    from course_utils.parallel import MAX_JOBS, parallel_map

    wanted = rf"items must hold at most {MAX_JOBS:,} jobs, got {re.escape(shown)}"
    with pytest.raises(ValueError, match=wanted):
        parallel_map(abs, items, timeout=2)
    assert parallel_map(abs, (x for x in (-1, -2)), workers=1) == [1, 2]


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

def test_seed_everything_takes_a_numpy_int_as_check_seed_does():
    import random

    import numpy as np

    from course_utils.env import seed_everything

    drawn = torch.randn(3, generator=seed_everything(np.int64(2)))
    first = random.random()
    assert torch.equal(drawn, torch.randn(3, generator=seed_everything(2)))
    assert random.random() == first  # Python's generator seeded from the same int


# -- battery 15 (fix45c) -----------------------------------------------------------------------------

def test_path_rule_still_takes_good_paths(tmp_path):
    paths.check_path(tmp_path, "where")
    paths.check_path(str(tmp_path), "where")
    assert paths.path_kind(tmp_path) == "a directory"


def test_an_empty_path_is_called_empty_not_the_wrong_type() -> None:
    """``''`` is a str: the message said "must be a str or Path ..., got str ''"; it says empty."""
    from course_utils.paths import check_path

    with pytest.raises(ValueError, match=r"^report must name a file, got an empty path ''$"):
        check_path("", "report")


# -- battery 17 (fix47u) -----------------------------------------------------------------------------

# -- 2: a parallel_map job that ignores SIGTERM is killed soon after its timeout -----------------
def _ignores_sigterm(x: int) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(300)  # far past any bound below: a job waited on, not killed, takes this long
    return x


def test_parallel_map_timeout_kills_a_job_that_ignores_sigterm():
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        parallel_map(_ignores_sigterm, [7], workers=1, timeout=1)
    took = time.monotonic() - started
    assert "items[0]" in str(info.value) and "timeout=1" in str(info.value)
    # 8 s alone, 35 s once at load 8 (starting the worker is most of it); 300 s if never killed
    assert took < 120, f"the TimeoutError came after {took:.1f} s"


# -- battery 21 (fix51v) -----------------------------------------------------------------------------

# -- group 8: parallel_map inside a parallel_map job runs the plain loop there ---------------------
def _nested(x: int) -> list[int]:
    return parallel.parallel_map(abs, [x, -x], workers=2)


@pytest.mark.skipif(not parallel._fork_available(), reason="needs forked workers (Linux, no CUDA GPU)")
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_parallel_map_inside_a_worker_gives_the_plain_loops_results(timeout):
    items = [1, 2, 3]
    got = parallel.parallel_map(_nested, items, workers=2, timeout=timeout)
    assert got == [[abs(x), abs(-x)] for x in items]


def test_no_fork_inside_a_daemonic_process(monkeypatch):
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True, raising=False)
    assert parallel._fork_available() is False
    assert parallel.default_workers(4) == 1


# -- battery 27 (fix57) ------------------------------------------------------------------------------

# -- small helpers that let an odd value escape ----------------------------------------------------------
def test_parallel_map_names_a_len_that_fails() -> None:
    from course_utils.parallel import parallel_map

    class Items:
        def __iter__(self):
            return iter([1, 2])

        def __len__(self):
            return -1

    raises_naming(TypeError, ["items", "len()", "Items"], lambda: parallel_map(abs, Items()))


def test_gradients_on_checks_its_label() -> None:
    from course_utils.env import gradients_on

    def enter() -> None:
        with gradients_on(5):
            pass

    raises_naming(TypeError, ["what", "int 5"], enter)


def test_check_path_names_an_fspath_that_raises() -> None:
    from course_utils.paths import check_path

    class BrokenPath:
        def __fspath__(self) -> str:
            raise RuntimeError("boom")

    raises_naming(TypeError, ["notebook", "BrokenPath", "__fspath__ failed", "boom"],
                  lambda: check_path(BrokenPath(), "notebook"))


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_check_seed_bad_repr_names_seed():
    from course_utils.env import check_seed

    with pytest.raises(TypeError, match=r"seed must be an int.*BadRepr"):
        check_seed(BadRepr())


# -- battery 31 --------------------------------------------------------------------------------------

# -- parallel_map_fn_arity: a fn of the wrong arity raised Python's bare TypeError from parallel.py --
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("fn", [lambda: 1, lambda a, b: 1], ids=["no argument", "two arguments"])
def test_parallel_map_names_a_fn_that_cannot_take_one_item(fn, workers):
    from course_utils.parallel import parallel_map

    with pytest.raises(TypeError, match=r"^fn must be a function of one item, called with 1 positional "
                                        r"argument, but <lambda>\(.*\) cannot take 1"):
        parallel_map(fn, [1, 2], workers=workers)
    assert parallel_map(lambda item, extra=0: item + extra, [1, 2], workers=workers) == [1, 2]
