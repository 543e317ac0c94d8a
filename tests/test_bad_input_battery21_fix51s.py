"""Battery 21 (issue 38), fix pass S (bench): a NumPy int seed reaches torch as a Python int in
mha_speed (2); clock_elapsed refuses bools as clock readings (13); the bench result records refuse
fields that contradict each other, by the formulas the benchmarks use (14)."""

from __future__ import annotations

import numpy as np
import pytest
from bad_input_cases import raises_naming

from course_utils.bench import mha_speed as MS


# -- 2: a NumPy int seed (check_seed accepts it) is passed on as the Python int it returns -------
@pytest.mark.parametrize("seed", [np.int64(0), np.int32(3), np.uint8(1)], ids=repr)
def test_bench_mha_takes_a_numpy_int_seed(seed) -> None:
    timings = MS.bench_mha(1, 4, 8, 2, repeats=1, seed=seed)
    assert {t.name for t in timings} == set(MS.IMPLEMENTATIONS)


@pytest.mark.parametrize("seed", [np.int64(0), np.int32(3)], ids=repr)
def test_compare_on_device_takes_a_numpy_int_seed(seed) -> None:
    result = MS.compare_on_device("cpu", batch=1, seq_len=4, d_model=8, num_heads=2,
                                  dtype=MS.torch.float32, repeats=1, seed=seed)
    assert "nn.MultiheadAttention" in result.max_abs_diff
