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


# -- lesson 4 additions ------------------------------------------------------------------

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.bench import (  # noqa: E402
    LESSON_IMPLEMENTATIONS,
    compare_on_device,
    count_dispatched_ops,
    cuda_unavailable_reason,
    lesson_implementations,
    plot_sweep,
    sdpa_backend_callables,
    sweep_mha,
    torch_threads,
)
from course_utils.bench import main as bench_main  # noqa: E402


def test_lesson_implementations_agree_and_have_short_names():
    mods = lesson_implementations(16, 4, dtype=torch.float64)
    assert list(mods) == list(LESSON_IMPLEMENTATIONS)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = mods["nn.MultiheadAttention"](x, x, x, need_weights=False)
        for name, m in mods.items():
            if name != "nn.MultiheadAttention":
                assert (m(x)[0] - ref).abs().max() < 1e-12, name


def test_bench_mha_lesson_names_and_baseline():
    timings = bench_mha(1, 4, 8, 2, repeats=2, lesson=True, baseline="batched", num_threads=1)
    assert [t.name for t in timings] == list(LESSON_IMPLEMENTATIONS)
    assert next(t for t in timings if t.name == "batched").ratio == 1.0
    assert all(len(t.samples_s) == 2 for t in timings)
    with pytest.raises(ValueError, match="baseline"):
        bench_mha(1, 4, 8, 2, repeats=1, lesson=True, baseline="nope")


def test_torch_threads_restores_and_rejects_bad_counts():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_threads"), torch_threads(bad):
            pass


def test_sweep_table_and_plot():
    table = sweep_mha("num_heads", [1, 2], batch=1, seq_len=4, d_model=8, repeats=2)
    assert list(table.index) == [1, 2] and table.index.name == "num_heads"
    assert list(table.columns) == list(LESSON_IMPLEMENTATIONS)
    assert (table.to_numpy() > 0).all()
    fig, ax = plt.subplots()
    plot_sweep(table, ax, title="t")
    assert ax.get_xlabel() == "num_heads" and len(ax.get_lines()) == 4
    plt.close(fig)


@pytest.mark.parametrize("kwargs,word", [
    ({"vary": "heads", "values": [1]}, "vary"),
    ({"vary": "seq_len", "values": []}, "values"),
    ({"vary": "seq_len", "values": [4], "statistic": "mean"}, "statistic"),
])
def test_sweep_rejects_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        sweep_mha(**kwargs)


def test_loop_runs_more_operations_the_more_heads():
    x = torch.randn(1, 4, 16)
    counts = {}
    for h in (2, 8):
        mods = lesson_implementations(16, h)
        with torch.inference_mode():
            counts[h] = {n: sum(count_dispatched_ops(lambda m=m: m(x)).values())
                         for n, m in mods.items() if n != "nn.MultiheadAttention"}
    assert counts[8]["loop over heads"] > counts[2]["loop over heads"] + 5 * 6
    assert counts[8]["batched"] == counts[2]["batched"]
    assert counts[8]["batched + F.sdpa"] < counts[8]["batched"]


def test_sdpa_backends_on_cpu_run_or_say_why_not():
    mha = lesson_implementations(16, 4)["batched + F.sdpa"]
    x = torch.randn(2, 6, 16)
    fns, skipped = sdpa_backend_callables(mha, x)
    assert "F.sdpa [math]" in fns  # the math backend runs everywhere
    assert set(skipped) | {k[len("F.sdpa ["):-1] for k in fns} == {"flash", "memory-efficient", "cuDNN",
                                                                     "math"}
    assert all(isinstance(why, str) and why for why in skipped.values())
    with torch.inference_mode():
        ref = mha(x)[0]
        for fn in fns.values():
            assert torch.allclose(fn(), ref, atol=1e-5)
    _, skipped = sdpa_backend_callables(mha, x, {"made up": "NO_SUCH_BACKEND"})
    assert "no SDPBackend.NO_SUCH_BACKEND" in skipped["made up"]
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        sdpa_backend_callables(torch.nn.Linear(2, 2), x)


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the message shown without a GPU")
def test_gpu_comparison_without_cuda_says_why():
    why = cuda_unavailable_reason()
    assert why and ("CPU-only" in why or "sees no GPU" in why)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        compare_on_device("cuda", batch=1, seq_len=4, d_model=8, num_heads=2)


def test_device_comparison_runs_on_cpu_and_agrees():
    result = compare_on_device("cpu", batch=1, seq_len=8, d_model=16, num_heads=2,
                               dtype=torch.float32, repeats=2)
    assert all(result.agree.values()), result.max_abs_diff
    assert "F.sdpa [math]" in result.max_abs_diff
    report = result.report()
    assert "cpu, float32" in report and "agrees" in report and "DIFFERS" not in report
    with pytest.raises(ValueError, match="dtype"):
        compare_on_device("cpu", dtype=torch.int64)


def test_cli_mha_runs(capsys, monkeypatch):
    import course_utils.bench as bench

    monkeypatch.setattr(bench, "bench_mha", lambda *a, **k: bench_mha(1, 4, 8, 2, repeats=1))
    bench_main(["mha", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "naive ModuleList of heads" in out and "ratio to nn.MHA" in out
