"""The benchmark helpers compute medians and ratios (no timing is asserted)."""

import torch

from course_utils.bench import bench_mha, format_table, mha_implementations, time_interleaved


def test_time_interleaved_ratios_are_relative_to_the_baseline():
    calls = []
    timings = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                               baseline="a", repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4  # interleaved: A B A B ...
    assert [t.name for t in timings] == ["a", "b"]
    assert timings[0].ratio == 1.0


def test_benchmarked_modules_compute_the_same_function():
    mods = mha_implementations(16, 4)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        ref, _ = mods["nn.MultiheadAttention"](x, x, x, need_weights=False)
        for name, m in mods.items():
            if name != "nn.MultiheadAttention":
                assert torch.allclose(m(x)[0], ref, atol=1e-5), name


def test_bench_table_has_every_row():
    timings = bench_mha(1, 4, 8, 2, repeats=2)
    table = format_table("tiny", timings, "nn.MHA")
    for name in ("nn.MultiheadAttention", "course MHA (batched)", "loop over heads"):
        assert name in table
