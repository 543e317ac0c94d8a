"""The benchmark helpers compute medians and ratios (no timing is asserted); the SDPA
backend diagnostics say why a backend cannot run."""

import dataclasses
import re
import statistics
import warnings

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch

import course_utils.attention.sdpa_backends as sdpa_backends
import course_utils.bench.mha_speed as mha_speed
import course_utils.bench.timing as timing
from course_utils.attention.sdpa_backends import (
    SDPA_BACKENDS,
    backend_rejection_reason,
    cuda_unavailable_reason,
    precision_notes,
    sdpa_backend_callables,
)
from course_utils.bench import (
    IMPLEMENTATIONS,
    TOLERANCES,
    Timing,
    bench_mha,
    compare_on_device,
    count_dispatched_ops,
    format_spread_table,
    format_table,
    interleaved_samples,
    lesson_implementations,
    paired_ratios,
    plot_sweep,
    ratio_spread,
    sweep_mha,
    time_interleaved,
    torch_threads,
)
from course_utils.bench import main as bench_main

matplotlib.use("Agg")


def test_time_interleaved_ratios_are_relative_to_the_baseline():
    calls = []
    timings = time_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                               baseline="a", repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4  # interleaved: A B A B ...
    assert [t.name for t in timings] == ["a", "b"]
    assert timings[0].ratio == 1.0



def test_interleaved_samples_order_hooks_and_warmup(monkeypatch):
    events = []
    ticks = iter(range(1000))

    def clock():
        events.append("clock")
        return float(next(ticks))

    monkeypatch.setattr(timing.time, "perf_counter", clock)
    samples = interleaved_samples({"a": lambda: events.append("a"), ("b", 2): lambda: events.append("b")},
                                  warmup=2, repeats=2, inner=2, before_each=lambda: events.append("flush"),
                                  sync=lambda: events.append("sync"))
    timed = ["flush", "sync", "clock", "a", "a", "sync", "clock",
             "flush", "sync", "clock", "b", "b", "sync", "clock"]
    assert events == ["a", "b"] * 2 + timed * 2  # warm-up without hooks, then A B A B, hooks untimed
    assert samples == {"a": [0.5, 0.5], ("b", 2): [0.5, 0.5]}  # one clock tick over inner=2 calls


def test_after_round_runs_once_per_round_warmup_included(capsys):
    events = []
    interleaved_samples({"a": lambda: events.append("a"), "b": lambda: events.append("b")}, warmup=1,
                        repeats=2, after_round=lambda: events.append("round"))
    assert events == ["a", "b", "round"] * 3
    timings = time_interleaved({"a": lambda: None}, baseline="a", repeats=2, warmup=1, progress="timing")
    assert [len(t.samples_s) for t in timings] == [2]
    assert "timing" in capsys.readouterr().err  # the text bar, on stderr
    time_interleaved({"a": lambda: None}, baseline="a", repeats=1, warmup=0)
    assert capsys.readouterr().err == ""  # no label: no bar


def test_the_clock_is_the_one_given():
    """time.thread_time for one-thread work: the samples are differences of the clock given."""
    ticks = iter([0.0, 0.5, 1.0, 3.0])
    samples = interleaved_samples({"a": lambda: None}, warmup=0, repeats=2, clock=lambda: next(ticks))
    assert samples == {"a": [0.5, 2.0]}
    from course_utils.bench.decode_step import clock_for

    assert clock_for(1) is timing.time.thread_time and clock_for(2) is timing.time.perf_counter
    with pytest.raises(TypeError, match="clock must be a function"):
        interleaved_samples({"a": lambda: None}, warmup=0, repeats=1, clock=3)


@pytest.mark.parametrize("kwargs,error,words", [
    ({"fns": {}}, ValueError, "at least one function"),
    ({"fns": {"a": 3}}, TypeError, "fns['a'] must be a function"),
    ({"repeats": 0}, ValueError, "repeats must be a positive int"),
    ({"warmup": -1}, ValueError, "warmup must be an int >= 0"),
    ({"inner": 1.5}, TypeError, "inner must be an int"),
    ({"before_each": "flush"}, TypeError, "before_each must be a function or None"),
    ({"sync": 1}, TypeError, "sync must be a function or None"),
    ({"after_round": "tick"}, TypeError, "after_round must be a function or None"),
])
def test_interleaved_samples_names_bad_input(kwargs, error, words):
    args = {"fns": {"a": lambda: None}, "warmup": 0, "repeats": 1, **kwargs}
    with pytest.raises(error, match=re.escape(words)):
        interleaved_samples(**args)
    if not {"fns", "after_round"} & set(kwargs):  # the public wrapper checks the same way
        with pytest.raises(error, match=re.escape(words)):
            time_interleaved(baseline="a", **args)

def test_benchmarked_modules_compute_the_same_function():
    mods = lesson_implementations(16, 4)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        ref, _ = mods["nn.MultiheadAttention"](x, x, x, need_weights=False)
        for name, m in mods.items():
            if name != "nn.MultiheadAttention":
                assert torch.allclose(m(x)[0], ref, atol=1e-5), name


def test_bench_table_has_every_row():
    timings = bench_mha(1, 4, 8, 2, repeats=2)
    table = format_table("tiny", timings, "nn.MultiheadAttention", "nn.MHA")
    for name in IMPLEMENTATIONS:
        assert name in table


def test_lesson_implementations_agree_and_have_short_names():
    mods = lesson_implementations(16, 4, dtype=torch.float64)
    assert tuple(mods) == IMPLEMENTATIONS
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        ref, _ = mods["nn.MultiheadAttention"](x, x, x, need_weights=False)
        for name, m in mods.items():
            if name != "nn.MultiheadAttention":
                assert (m(x)[0] - ref).abs().max() < 1e-12, name


def test_bench_mha_lesson_names_and_baseline():
    timings = bench_mha(1, 4, 8, 2, repeats=2, baseline="batched", num_threads=1)
    assert tuple(t.name for t in timings) == IMPLEMENTATIONS
    assert next(t for t in timings if t.name == "batched").ratio == 1.0
    assert all(len(t.samples_s) == 2 for t in timings)
    with pytest.raises(ValueError, match="baseline"):
        bench_mha(1, 4, 8, 2, repeats=1, baseline="nope")


def test_torch_threads_restores_and_rejects_bad_counts():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    for bad, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="num_threads must be"), torch_threads(bad):
            pass


def test_sweep_table_and_plot():
    table = sweep_mha("num_heads", [1, 2], batch=1, seq_len=4, d_model=8, repeats=2)
    assert list(table.index) == [1, 2] and table.index.name == "num_heads"
    assert tuple(table.columns) == IMPLEMENTATIONS
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
    with pytest.raises(ValueError, match=r"backends\['made up'\] must name an SDPBackend member.*NO_SUCH"):
        sdpa_backend_callables(mha, x, {"made up": "NO_SUCH_BACKEND"})  # a typo, not a missing backend
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        sdpa_backend_callables(torch.nn.Linear(2, 2), x)


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the message shown without a GPU")
def test_gpu_comparison_without_cuda_says_why():
    why = cuda_unavailable_reason()
    assert why and ("CPU-only" in why or "sees no GPU" in why)
    with pytest.raises(RuntimeError, match="cannot run: this PyTorch"):
        compare_on_device("cuda", batch=1, seq_len=4, d_model=8, num_heads=2)


@pytest.mark.parametrize("device", ["cuda", "cuda:1", torch.device("cuda", 0)], ids=str)
def test_gpu_comparison_without_cuda_names_the_device(monkeypatch, device):
    """Issue 38: the message named 'cuda' whatever was asked for, and never the argument."""
    monkeypatch.setattr(mha_speed, "cuda_unavailable_reason", lambda: "no GPU here (a test)")
    with pytest.raises(RuntimeError) as info:
        compare_on_device(device, batch=1, seq_len=4, d_model=8, num_heads=2)
    assert f"compare_on_device(device={str(device)!r}) cannot run: no GPU here" in str(info.value)


@pytest.mark.parametrize("device, error, words", [
    ("cuda:x", ValueError, ["device", "'cuda:x'", "'cuda:0'"]),
    ("cuda:-1", ValueError, ["device", "'cuda:-1'"]),
    ("tpu", ValueError, ["device", "'tpu'"]),
    (3, TypeError, ["device", "str or torch.device", "int 3"]),
    (None, TypeError, ["device", "NoneType"]),
])
def test_gpu_comparison_names_a_malformed_device_before_asking_for_cuda(monkeypatch, device, error, words):
    """'cuda:x' was reported as "CUDA is not available" on a machine without a GPU, and would
    have been torch's own error on one with a GPU: it is named as malformed on both."""
    monkeypatch.setattr(mha_speed, "cuda_unavailable_reason", lambda: "no GPU here (a test)")
    with pytest.raises(error) as info:
        compare_on_device(device, batch=1, seq_len=4, d_model=8, num_heads=2)
    assert all(w in str(info.value) for w in words) and "no GPU here" not in str(info.value), info.value


def test_old_torch_without_sdpa_kernel_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setattr(sdpa_backends, "_sdpa_kernel_api", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "older than 2.3" in cuda_unavailable_reason()
    with pytest.raises(RuntimeError, match="older than 2.3"):
        compare_on_device("cuda", batch=1, seq_len=4, d_model=8, num_heads=2)
    mha = lesson_implementations(16, 4)["batched + F.sdpa"]
    fns, skipped = sdpa_backend_callables(mha, torch.randn(1, 3, 16))
    assert fns == {} and set(skipped) == set(SDPA_BACKENDS)
    assert all("torch >= 2.3" in why for why in skipped.values())


def test_device_comparison_runs_on_cpu_and_agrees():
    result = compare_on_device("cpu", batch=1, seq_len=8, d_model=16, num_heads=2,
                               dtype=torch.float32, repeats=2)
    assert all(result.agree.values()), result.max_abs_diff
    assert "F.sdpa [math]" in result.max_abs_diff
    report = result.report()
    assert "cpu, float32" in report and "agrees" in report and "DIFFERS" not in report
    assert result.atol == pytest.approx(TOLERANCES[torch.float32] * result.reference_std)
    assert 0.01 < result.reference_std < 10
    assert "No viable backend" not in report  # the generic CPU error adds nothing
    with pytest.raises(ValueError, match="dtype"):
        compare_on_device("cpu", dtype=torch.int64)


def test_float16_tolerance_is_on_the_outputs_scale():
    """fp16 is compared at 1e-2 of the output's std, i.e. about 1e-3 here, not at 1e-2."""
    result = compare_on_device("cpu", batch=1, seq_len=8, d_model=16, num_heads=2,
                               dtype=torch.float32, repeats=1)
    assert TOLERANCES[torch.float16] * result.reference_std < 5e-3
    name = next(t.name for t in result.timings if t.name != "nn.MultiheadAttention")
    # a frozen record: a changed copy is checked again (a max |diff| only for a timed function)
    result = dataclasses.replace(result, max_abs_diff={**result.max_abs_diff, name: 2 * result.atol},
                                 agree={**result.agree, name: False})
    assert "DIFFERS" in result.report()


def test_backend_rejection_reason_asks_pytorch_per_backend(monkeypatch):
    q = torch.randn(1, 2, 4, 8)
    assert backend_rejection_reason("math", q, q, q) is None  # math has no can_use_* check

    def fake_can_use(params, debug):
        assert isinstance(params, torch.backends.cuda.SDPAParams) and debug is True
        warnings.warn("Flash attention requires q,k,v to have the same last dimension "
                      "(Triggered internally at sdp_utils.cpp:9.)", stacklevel=2)
        return False

    monkeypatch.setattr(torch.backends.cuda, "can_use_flash_attention", fake_can_use)
    assert backend_rejection_reason("flash", q, q, q) == (
        "Flash attention requires q,k,v to have the same last dimension")
    monkeypatch.setattr(torch.backends.cuda, "can_use_flash_attention", lambda params, debug: True)
    assert backend_rejection_reason("flash", q, q, q) is None
    monkeypatch.setattr(torch.backends.cuda, "can_use_flash_attention", lambda params, debug: False)
    assert backend_rejection_reason("flash", q, q, q) == (
        "torch.backends.cuda.can_use_flash_attention returned False")  # no warning to quote
    monkeypatch.delattr(torch.backends.cuda, "can_use_cudnn_attention")  # as in torch < 2.4
    assert backend_rejection_reason("cuDNN", q, q, q) is None


def test_tf32_note_only_for_float32_on_cuda(monkeypatch):
    assert precision_notes("cpu", torch.float32) == []
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert "TF32" in precision_notes("cuda", torch.float32)[0]
    assert precision_notes("cuda", torch.float16) == []
    assert precision_notes("cpu", torch.float32) == []
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    assert precision_notes("cuda", torch.float32) == []


def _timings(samples: dict[str, list[float]]) -> list[Timing]:
    return [Timing(n, statistics.median(s), 1.0, s) for n, s in samples.items()]


def test_paired_ratios_and_their_spread():
    timings = _timings({"loop": [2.0, 3.0, 2.2, 2.4, 2.6], "batched": [1.0, 2.0, 1.0, 1.0, 1.0]})
    assert paired_ratios(timings, "loop", "batched") == pytest.approx([2.0, 1.5, 2.2, 2.4, 2.6])
    spread = ratio_spread(timings, "loop", "batched")
    assert (spread.low, spread.median, spread.high, spread.repeats) == pytest.approx((1.5, 2.2, 2.6, 5))
    assert spread.q1 == pytest.approx(2.0) and spread.q3 == pytest.approx(2.4)
    assert spread.verdict().startswith("loop: slower than batched")
    assert timings[0].best_s == 2.0
    with pytest.raises(ValueError, match="nope"):
        paired_ratios(timings, "nope", "batched")
    with pytest.raises(ValueError, match="same non-zero number"):
        paired_ratios(_timings({"a": [1.0], "b": [1.0, 2.0]}), "a", "b")


@pytest.mark.parametrize("loop,word", [
    ([0.5, 0.6, 0.7, 0.6], "faster than"),
    ([0.8, 1.3, 0.9, 1.2], "no clear difference from"),
    ([1.5], "slower than"),
])
def test_verdict_follows_the_middle_half(loop, word):
    timings = _timings({"loop": loop, "batched": [1.0] * len(loop)})
    assert f"loop: {word} batched" in ratio_spread(timings, "loop", "batched").verdict()


def test_spread_table_lists_best_median_and_ratio():
    timings = _timings({"loop": [0.002, 0.004, 0.003], "batched": [0.001, 0.002, 0.001]})
    table = format_spread_table("t", timings, "batched", "B")
    assert "ratio to B" in table and "best ms" in table and "median ms" in table
    loop_row = next(line for line in table.splitlines() if line.startswith("loop"))
    assert "2.000" in loop_row and "3.000" in loop_row and "2.00x" in loop_row


def test_cli_mha_runs(capsys, monkeypatch):
    import course_utils.bench.mha_speed as mha_speed

    monkeypatch.setattr(mha_speed, "bench_mha", lambda *a, **k: bench_mha(1, 4, 8, 2, repeats=1))
    bench_main(["mha", "--repeats", "1"])
    out = capsys.readouterr().out
    assert all(name in out for name in IMPLEMENTATIONS) and "ratio to nn.MHA" in out
    assert "loop over heads: " in out and "in this run" in out  # the printed verdict


def test_a_kv_cache_smaller_than_the_cpu_cache_is_named_before_the_figures(monkeypatch):
    from course_utils.bench.gqa_speed import small_cache_note
    monkeypatch.setenv("COURSE_UTILS_LLC_MIB", "32")
    note = small_cache_note(3, 8)  # 2 * 8 layers * 16 heads * 3 tokens * 64 * 4 bytes = 192 KiB
    assert note is not None and max(len(line) for line in note.splitlines()) <= 100
    note = " ".join(note.split())
    assert note is not None and "--context 3" in note and "192 KiB" in note and "32 MiB" in note
    assert small_cache_note(4096, 8) is None  # 256 MiB of cache: memory reads dominate
