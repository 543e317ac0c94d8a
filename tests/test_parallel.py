"""parallel_map: the results of a plain loop, in order, from forked workers; clear errors."""

import os
import re
import sys

import pytest
import torch

from course_utils.parallel import default_workers, parallel_map
from course_utils.tasks.two_relations import TrainConfig, TwoKeyTask, compare_heads

TASK = TwoKeyTask(num_items=8, num_keys=16, num_symbols=8, max_repeats=3)
FORK = default_workers(2) > 1  # Linux with at least two usable cores


def _noisy_sum(seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1000, generator=generator).cumsum(0)


def test_results_equal_a_loop_in_order():
    items = [5, 1, 4, 2, 3]
    expected = [_noisy_sum(i) for i in items]
    for workers in (1, 2, 3):
        got = parallel_map(_noisy_sum, items, workers=workers)
        assert len(got) == len(items) and all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.skipif(not FORK, reason="needs fork (Linux) and two cores")
def test_work_happens_in_other_processes_and_lambdas_work():
    pids = parallel_map(lambda _: os.getpid(), range(4), workers=2)
    assert os.getpid() not in pids
    assert parallel_map(lambda x: torch.get_num_threads(), range(2), workers=2) == [1, 1]


@pytest.mark.skipif(not FORK, reason="needs fork (Linux) and two cores")
def test_a_failing_job_raises_with_its_traceback():
    def fail_on_three(x):
        if x == 3:
            raise KeyError("no three here")
        return x

    with pytest.raises(RuntimeError, match=r"fn\(items\[2\]\) failed(?s:.*)KeyError: 'no three here'"):
        parallel_map(fail_on_three, [1, 2, 3, 4], workers=2)
    with pytest.raises(RuntimeError, match="failed in a worker"):
        parallel_map(lambda x: (lambda: x), [1, 2], workers=2)  # a result that cannot be pickled


def test_bad_workers_named():
    for bad, error, words in ((0, ValueError, "workers must be a positive int, got 0"),
                              (-1, ValueError, "workers must be a positive int, got -1"),
                              (1.5, TypeError, "workers must be an int, got float 1.5"),
                              (True, TypeError, "workers must be an int, got bool True"),
                              ("2", TypeError, "workers must be an int, got str '2'")):
        with pytest.raises(error, match=re.escape(words)):
            parallel_map(_noisy_sum, [1, 2], workers=bad)
    assert parallel_map(_noisy_sum, [], workers=2) == []


def test_compare_heads_in_parallel_equals_one_after_another():
    config = TrainConfig(steps=30, eval_every=10, batch_size=32, eval_size=64)

    def record(num_heads, seed, step, model):
        return (num_heads, seed, step) if step in (0, 30) else None

    one = compare_heads(TASK, heads=(1, 2), seeds=(0, 1), config=config, on_eval=record, workers=1)
    two = compare_heads(TASK, heads=(1, 2), seeds=(0, 1), config=config, on_eval=record, workers=2)
    for a, b in zip(one, two, strict=True):
        assert (a.num_heads, a.seed, a.accuracy) == (b.num_heads, b.seed, b.accuracy)
        assert a.recorded == b.recorded == {0: (a.num_heads, a.seed, 0), 30: (a.num_heads, a.seed, 30)}
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))


# -- bad inputs and jobs that misbehave -------------------------------------------------------
def _exits(x):
    import sys

    sys.exit(3)


def _exits_on_two(x):
    if x == 2:
        raise SystemExit(3)
    return x


class _Unpicklable:
    """Pickles fine, fails to unpickle (as an object whose __reduce__ lies does)."""

    def __reduce__(self):
        return (int, ("not a number",))


def _sleeps_on_two(x):
    import time

    if x == 2:
        time.sleep(120)  # a job that never returns, as far as the caller can tell
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_sys_exit_in_fn_is_one_runtime_error_naming_the_item(workers):
    if workers == 2 and not FORK:
        pytest.skip("needs fork (Linux) and two cores")
    item = r"0" if workers == 1 else r"[01]"  # both exit: with two workers either may be seen first
    with pytest.raises(RuntimeError, match=rf"fn\(items\[{item}\]\) called sys.exit\(3\)") as info:
        parallel_map(_exits, [1, 2], workers=workers)
    assert not isinstance(info.value, SystemExit)
    with pytest.raises(RuntimeError, match=r"fn\(items\[1\]\) called sys.exit\(3\)"):
        parallel_map(_exits_on_two, [1, 2, 3], workers=workers)


@pytest.mark.skipif(not FORK, reason="needs fork (Linux) and two cores")
def test_a_result_that_does_not_unpickle_is_named():
    with pytest.raises(RuntimeError, match=r"result of fn\(items\[[01]\]\) .* could not be unpickled"
                                           r"(?s:.*)ValueError"):
        parallel_map(lambda x: _Unpicklable(), [1, 2], workers=2)


def _exit_while_unpickling():
    raise SystemExit(7)


def _interrupt_while_unpickling():
    raise KeyboardInterrupt("from unpickling")


class _ExitsWhenUnpickled:
    def __reduce__(self):
        return (_exit_while_unpickling, ())


class _InterruptsWhenUnpickled:
    def __reduce__(self):
        return (_interrupt_while_unpickling, ())


class _BadRepr:
    def __repr__(self):
        raise ZeroDivisionError("no repr")


@pytest.mark.skipif(not FORK, reason="needs fork (Linux) and two cores")
@pytest.mark.parametrize("result, raised", [(_ExitsWhenUnpickled, "SystemExit"),
                                            (_InterruptsWhenUnpickled, "KeyboardInterrupt")])
def test_a_result_that_exits_or_interrupts_while_unpickling_is_the_documented_error(result, raised):
    with pytest.raises(RuntimeError, match=rf"result of fn\(items\[[01]\]\) .* could not be unpickled "
                                           rf"here \({raised}"):
        parallel_map(lambda x: result(), [1, 2], workers=2)


@pytest.mark.parametrize("workers", [1, 2])
def test_sys_exit_with_an_object_whose_repr_fails_names_its_type(workers):
    if workers == 2 and not FORK:
        pytest.skip("needs fork (Linux) and two cores")
    item = r"0" if workers == 1 else r"[01]"  # both exit: either may be seen first (seen in CI)
    with pytest.raises(RuntimeError, match=rf"fn\(items\[{item}\]\) called sys.exit\(<_BadRepr object>\)"):
        parallel_map(lambda x: sys.exit(_BadRepr()), [1, 2], workers=workers)


def test_an_infinite_timeout_is_no_limit():
    assert parallel_map(lambda x: x + 1, [1, 2], workers=2, timeout=float("inf")) == [2, 3]
    assert parallel_map(lambda x: x + 1, [1], workers=1, timeout=float("inf")) == [2]


@pytest.mark.skipif(not FORK, reason="needs fork (Linux)")
@pytest.mark.parametrize("workers", [1, 2])
def test_a_job_that_never_returns_is_stopped_by_the_timeout(workers):
    import time

    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"fn\(items\[1\]\) did not return within timeout=1 s"):
        parallel_map(_sleeps_on_two, [1, 2, 3], workers=workers, timeout=1)
    assert time.monotonic() - start < 30  # not the job's 120 s


def test_without_a_timeout_a_slow_job_is_waited_for():
    import time

    def slow(x):
        time.sleep(0.3)
        return x

    assert parallel_map(slow, [1, 2], workers=2) == [1, 2]  # default timeout=None: no limit
    assert parallel_map(slow, [1, 2], workers=2, timeout=60) == [1, 2]  # within the limit
    assert parallel_map(slow, [1], workers=1, timeout=60) == [1]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"fn": None}, TypeError, ["fn", "function", "NoneType"]),
    ({"items": 5}, TypeError, ["items", "iterable", "int 5"]),
    ({"timeout": 0}, ValueError, ["timeout", "> 0", "0"]),
    ({"timeout": "1"}, TypeError, ["timeout", "number", "str"]),
    ({"timeout": float("nan")}, ValueError, ["timeout", "nan"]),
    ({"timeout": 1e300}, ValueError, ["timeout", "at most", "1e+300", "None (or inf)"]),
])
def test_bad_arguments_are_named(kwargs, error, words):
    call = {"fn": _noisy_sum, "items": [1, 2], "workers": 2, **kwargs}
    with pytest.raises(error) as info:
        parallel_map(call.pop("fn"), call.pop("items"), **call)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_without_fork_the_timeout_interrupts_the_plain_loop(monkeypatch):
    import time

    from course_utils import parallel

    monkeypatch.setattr(parallel, "_fork_available", lambda: False)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"fn\(items\[1\]\)"):
        parallel_map(_sleeps_on_two, [1, 2, 3], workers=2, timeout=0.5)
    assert time.monotonic() - start < 30
    assert parallel_map(_sleeps_on_two, [1, 3], workers=2, timeout=5) == [1, 3]
    with pytest.raises(RuntimeError, match=r"fn\(items\[0\]\) called sys.exit\(3\)"):
        parallel_map(_exits, [1, 2], workers=2)
