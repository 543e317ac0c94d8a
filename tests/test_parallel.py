"""parallel_map: the results of a plain loop, in order, from forked workers; clear errors."""

import os

import pytest
import torch

from course_utils.parallel import default_workers, parallel_map
from course_utils.two_relations import TrainConfig, TwoKeyTask, compare_heads

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
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="workers must be a positive int"):
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
