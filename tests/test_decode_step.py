"""The whole-step decoder computes a real decoder step, counts its bytes, and the benchmark's
quantities agree with each other (no speed is asserted)."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention.fused_decode import fused_decode_status
from course_utils.bench import decode_step
from course_utils.bench import main as bench_main
from course_utils.bench.decode_step import (
    FALLBACK_LLC_BYTES,
    SmallDecoder,
    bench_whole_step,
    flush_bytes,
    last_level_cache_bytes,
    read_bandwidth,
)

MiB = 2**20


def _fake_sysfs(root: Path, entries: list[tuple[int, str, str]]) -> Path:
    for i, (level, kind, size) in enumerate(entries):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


def test_the_last_level_cache_is_the_highest_level_in_sysfs(tmp_path, monkeypatch):
    monkeypatch.delenv(decode_step.LLC_ENV, raising=False)
    root = _fake_sysfs(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                  (3, "Unified", "32768K")])
    assert last_level_cache_bytes(root) == (32 * MiB, str(root))


def test_without_sysfs_lscpu_then_a_stated_guess(tmp_path, monkeypatch):
    monkeypatch.delenv(decode_step.LLC_ENV, raising=False)
    monkeypatch.setattr(decode_step, "_from_lscpu", lambda: 16 * MiB)
    assert last_level_cache_bytes(tmp_path / "none") == (16 * MiB, "lscpu")
    monkeypatch.setattr(decode_step, "_from_lscpu", lambda: None)
    size, source = last_level_cache_bytes(tmp_path / "none")
    assert size == FALLBACK_LLC_BYTES and "assumed" in source


def test_lscpu_sizes_parse():
    assert decode_step._parse_size("32 MiB (1 instance)") == 32 * MiB
    assert decode_step._parse_size("1.5 MiB") == int(1.5 * MiB)
    assert decode_step._parse_size("32768K") == 32 * MiB
    assert decode_step._parse_size("a lot") is None


def test_the_flush_is_a_multiple_of_the_last_level_cache():
    assert flush_bytes(3) == min(3 * last_level_cache_bytes()[0], decode_step.FLUSH_CAP_BYTES)
    assert flush_bytes(3, cap=MiB) == MiB
    with pytest.raises(ValueError, match="multiple"):
        flush_bytes(0)


def test_read_bandwidth_is_bytes_over_the_best_time(monkeypatch):
    buffer, flush = torch.rand(2**18), torch.rand(2**18)
    samples = {"read": [4e-3, 1e-3, 2e-3]}  # seconds per repeat: the best is 1 ms
    monkeypatch.setattr(decode_step, "time_flushed", lambda fns, f, warmup, repeats: samples)
    assert read_bandwidth(buffer, flush=flush, repeats=3) == pytest.approx(2**20 / 1e-3 / 1e9)


def test_time_flushed_reads_the_flush_buffer_before_every_timed_call():
    events = []

    class Flush:
        def sum(self) -> None:
            events.append("flush")

    samples = decode_step.time_flushed({"a": lambda: events.append("a"), "b": lambda: events.append("b")},
                                       Flush(), warmup=1, repeats=2)
    assert events == ["a", "b"] + ["flush", "a", "flush", "b"] * 2  # warm-up unflushed, then interleaved
    assert list(samples) == ["a", "b"] and all(len(s) == 2 for s in samples.values())


def _reference_step(dec: SmallDecoder, x: torch.Tensor, k_old, v_old) -> torch.Tensor:
    """The same step written plainly: repeat_interleave + F.sdpa over the cache and the new token."""
    d, h, g, dk = dec.d_model, dec.num_heads, dec.num_kv_heads, dec.d_head
    for (w_qkv, w_o, w_up, w_down), k_c, v_c in zip(dec.layers, k_old, v_old, strict=True):
        q, k, v = (F.layer_norm(x, (d,)) @ w_qkv.T).split((h * dk, g * dk, g * dk), 1)
        k_all = torch.cat([k_c, k.view(-1, g, 1, dk)], 2).repeat_interleave(h // g, 1)
        v_all = torch.cat([v_c, v.view(-1, g, 1, dk)], 2).repeat_interleave(h // g, 1)
        heads = F.scaled_dot_product_attention(q.view(-1, h, 1, dk), k_all, v_all)
        x = x + heads.reshape(-1, d) @ w_o.T
        x = x + F.gelu(F.layer_norm(x, (d,)) @ w_up.T) @ w_down.T
    return x


@pytest.mark.parametrize("attention", ["course", "auto"])
@pytest.mark.parametrize("g", [8, 2, 1])
def test_a_step_is_a_decoder_step_over_the_cache_and_the_new_token(attention, g):
    dec = SmallDecoder(512, 8, g, 2, context=37, batch=3, attention=attention)
    k_old = [k[:, :, :37].clone() for k, _ in dec.cache]
    v_old = [v[:, :, :37].clone() for _, v in dec.cache]
    with torch.inference_mode():
        got = dec.step()
        again = dec.step()  # the new token's slot is overwritten, not appended to
    torch.testing.assert_close(got, _reference_step(dec, dec.x, k_old, v_old), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(again, got)
    assert dec.cache[0][0].shape == (3, g, 38, 64)
    if attention == "auto":
        assert dec.attention == ("fused" if fused_decode_status() is None else "course")


def test_bytes_read_are_the_weights_and_the_cache():
    """At the benchmark's shape: 384 MiB of MHA weights (12 d^2 floats per layer, 8 layers) and
    256 MiB of MHA cache at 4096 tokens; GQA-4 reads 336 + 64 MiB: a byte bound of 1.6x."""
    d, L = 1024, 8
    mha = 4 * L * (3 * d * d + d * d + 8 * d * d)
    gqa4 = 4 * L * ((16 + 2 * 4) * 64 * d + d * d + 8 * d * d)
    assert (mha, gqa4) == (384 * MiB, 336 * MiB)
    assert (mha + 256 * MiB) / (gqa4 + 64 * MiB) == pytest.approx(1.6)
    small = SmallDecoder(128, 2, 1, 3, context=9, batch=2, mlp_ratio=2, attention="course")
    assert small.weight_bytes == 4 * 3 * ((2 + 2) * 64 * 128 + 128 * 128 + 2 * 2 * 128 * 128)
    assert small.cache_bytes == 4 * 3 * 2 * 2 * 1 * 10 * 64  # K and V, context + the new slot
    assert small.bytes_read == small.weight_bytes + small.cache_bytes


def test_decoders_share_weights_only_where_they_can():
    mha = SmallDecoder(128, 2, 2, 1, context=4, attention="course")
    mqa = SmallDecoder(128, 2, 1, 1, context=4, attention="course", share_from=mha)
    assert mqa.layers[0][1] is mha.layers[0][1] and mqa.layers[0][0].shape == (4 * 64, 128)
    with pytest.raises(ValueError, match="share_from"):
        SmallDecoder(256, 4, 1, 1, context=4, attention="course", share_from=mha)


@pytest.mark.parametrize("kwargs, word", [({"num_kv_heads": 3}, "num_kv_heads"), ({"context": 0}, "context"),
                                          ({"attention": "magic"}, "attention")])
def test_bad_decoder_settings_say_which(kwargs, word):
    with pytest.raises(ValueError, match=word):
        SmallDecoder(**{"d_model": 128, "num_heads": 2, "num_kv_heads": 2, "num_layers": 1, **kwargs})


def test_whole_step_quantities_agree():
    result = bench_whole_step(((1, 16), (2, 8)), (4, 2, 1), d_model=256, num_heads=4, num_layers=1,
                              repeats=3, warmup=1, flush_multiple=1)
    assert result.shapes() == [(1, 16), (2, 8)]
    assert len(result.read_s) == 6 and result.read_gb_per_s > 0
    for b, t in result.shapes():
        assert result.speedup(b, t, 4) == pytest.approx(1.0) == result.paired_speedup(b, t, 4)
        mha = result.row(b, t, 4)
        for g in (2, 1):
            row = result.row(b, t, g)
            assert row.cache_bytes * g == mha.cache_bytes * 1 or row.cache_bytes * 4 == mha.cache_bytes * g
            assert result.byte_bound(b, t, g) == pytest.approx(mha.bytes_read / row.bytes_read)
            assert result.speedup(b, t, g) == pytest.approx(mha.best_s / row.best_s)
            assert result.share_of_bound(b, t, g) == pytest.approx(
                result.speedup(b, t, g) / result.byte_bound(b, t, g))
            assert math.isclose(result.read_share(row), row.gb_per_s() / result.read_gb_per_s)
        assert len(result.weights_s[(b, t)]) == 3
        best = min(result.weights_s[(b, t)])
        assert result.weights_gb_per_s(b, t) == pytest.approx(mha.weight_bytes / best / 1e9)
    text = result.format()
    assert "read-only bandwidth" in text and max(len(line) for line in text.splitlines()) <= 100
    assert "B=2, context 8: the weights alone" in text
    with pytest.raises(ValueError, match="groups"):
        bench_whole_step(((1, 8),), (2, 1), d_model=256, num_heads=4, num_layers=1)


def test_cli_prints_attention_only_and_whole_step_tables(capsys):
    bench_main(["gqa", "--repeats", "1", "--context", "32", "--layers", "1", "--shapes", "1x32", "2x16"])
    out = capsys.readouterr().out
    assert out.index("ATTENTION ONLY") < out.index("WHOLE STEP")
    assert "read-only bandwidth" in out and "share" in out and "  2      16  16 |" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_the_attention_table_reports_read_only_bandwidth_and_each_share():
    from course_utils.bench.gqa_speed import bench_decode

    result = bench_decode(8, 64, 64, 1, groups=(8, 2), repeats=2, warmup=0, copy_mib=0, flush_multiple=1)
    assert result.copy_s == () and "copy bandwidth" not in result.format()
    assert result.flush_bytes == result.read_bytes == flush_bytes(1)
    for g in (8, 2):
        assert result.read_share(g) == pytest.approx(result.row(g).gb_per_s() / result.read_gb_per_s)
    text = result.format()
    assert "read-only bandwidth" in text and "share of it" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    with_copy = bench_decode(8, 64, 64, 1, groups=(8, 2), repeats=1, warmup=0, copy_mib=1, flush_multiple=1)
    assert with_copy.copy_bytes == 2 * MiB and "for reference" in with_copy.format()


def _whole_step(samples: dict[int, list[float]]):
    """A WholeStep with the given g -> repeats (ms), one shape, no timing run."""
    from course_utils.bench.decode_step import StepRow, WholeStep, decoder_bytes

    rows = [StepRow(1, 1024, g, *decoder_bytes(1024, 16, g, 2, context=1024, batch=1, mlp_ratio=4),
                    [s / 1e3 for s in times]) for g, times in samples.items()]
    return WholeStep(1024, 16, 2, 4, torch.float32, "fused", 1, rows, [0.004], 128 * MiB,
                     (32 * MiB, "test"), 128 * MiB)


def test_whole_step_check_line_when_a_share_exceeds_100_percent_or_repeats_scatter():
    quiet = _whole_step({16: [6.0, 6.1, 6.2], 4: [5.5, 5.6, 5.7]})  # 1.09x / bound 1.27: 86%
    assert quiet.noise_warnings() == [] and "check:" not in quiet.format()
    beyond = _whole_step({16: [8.0, 8.1, 8.2], 4: [4.0, 4.1, 4.2]})  # 2.0x against a 1.27 bound
    text = beyond.format()
    share = beyond.share_of_bound(1, 1024, 4)
    assert share > 1.0
    assert f"check: share of the byte bound above 100% (B=1 context 1024 g=4 {share:.0%})" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    scattered = _whole_step({16: [6.0, 9.5, 9.6], 4: [5.5, 5.6, 5.7]})  # median 1.6x the best
    assert any(w.startswith("check: noisy run") and "g=16" in w for w in scattered.noise_warnings())


def test_the_probe_is_checked_against_its_one_thread_figure():
    """A two-thread probe above 1.6 times the one-thread one has likely read from the cache."""
    from course_utils.bench.gqa_speed import PROBE_SANITY, DecodeBench, DecodeRow

    def bench(two_thread_s: float) -> DecodeBench:
        row = DecodeRow(16, 256 * MiB, {"course": [0.01, 0.01]})
        return DecodeBench(16, 64, 4096, 8, 1, 2, [row], [0.01, 0.01], [], 0, read_s=[two_thread_s] * 2,
                           read_bytes=128 * MiB, read_one_thread_s=[0.005] * 2)  # 26.8 GB/s
    assert PROBE_SANITY == 1.6
    assert not any("probe" in w for w in bench(0.0035).noise_warnings())  # 38 GB/s: 1.4x
    high = bench(0.0019).noise_warnings()  # 71 GB/s: 2.6x the one-thread figure
    assert any(w.startswith("check: the 2-thread read-only probe") for w in high)
    result = __import__("course_utils.bench.gqa_speed", fromlist=["bench_decode"]).bench_decode(
        8, 64, 64, 1, groups=(8, 2), repeats=2, warmup=0, copy_mib=0, flush_multiple=1,
        num_threads=2)  # explicit: CI's pytest workers run torch on one thread each
    assert len(result.read_one_thread_s) == 2


# -- buffer sizes: capped, whatever cache the CPU reports ---------------------------------------


def test_a_large_reported_cache_is_capped(monkeypatch):
    """An Intel server reports a whole socket's L3 (300 MiB and more): four times it, for the
    flush and again for the probe, would be 2.4 GB. Each buffer stays at the cap, and the
    tables say what the cap costs."""
    from course_utils.bench.decode_step import FLUSH_CAP_BYTES, LLC_ENV, flush_note

    monkeypatch.setenv(LLC_ENV, "300")
    assert last_level_cache_bytes() == (300 * MiB, LLC_ENV)
    assert flush_bytes() == flush_bytes(1) == FLUSH_CAP_BYTES == 256 * MiB
    assert "capped at 256 MiB" in flush_note(flush_bytes()) and "read high" in flush_note(flush_bytes())
    monkeypatch.setenv(LLC_ENV, "32")  # the course's AMD machine: 4 x 32 MiB, under the cap
    assert flush_bytes() == 128 * MiB and flush_note(flush_bytes()) is None
    monkeypatch.setenv(LLC_ENV, "lots")
    with pytest.raises(ValueError, match=LLC_ENV):
        last_level_cache_bytes()


def test_every_benchmark_buffer_stays_under_the_cap_with_a_300_mib_cache(monkeypatch):
    """Every flush and probe buffer the lesson's benchmarks ask for, with the cache faked at
    300 MiB: none above the cap (the buffers are recorded, and made small so the test is)."""
    from course_utils.bench import gqa_speed
    from course_utils.bench.decode_step import FLUSH_CAP_BYTES, LLC_ENV

    monkeypatch.setenv(LLC_ENV, "300")
    asked = []

    def small_buffer(num_bytes: int, seed: int = 0) -> torch.Tensor:
        asked.append(num_bytes)
        return torch.rand(1024, generator=torch.Generator().manual_seed(seed))

    monkeypatch.setattr(decode_step, "random_buffer", small_buffer)
    monkeypatch.setattr(gqa_speed, "random_buffer", small_buffer)
    gqa_speed.bench_decode(8, 64, 64, 1, groups=(8, 2), repeats=1, warmup=0, copy_mib=0, progress=False)
    bench_whole_step(((1, 8),), (4, 1), d_model=256, num_heads=4, num_layers=1, repeats=1, warmup=0,
                     progress=False)
    gqa_speed.time_cold({"a": lambda: None}, baseline="a", repeats=1, warmup=0, progress=None)
    gqa_speed.stage_times((4, 1), num_heads=4, d_head=8, context=32, num_layers=1, repeats=1)
    read_bandwidth(repeats=1)
    assert len(asked) == 8 and max(asked) == FLUSH_CAP_BYTES  # 2 + 2 + 1 + 1 + 2 buffers


class _FakeClock:
    """A clock that each probe advances by its own number of seconds: a race without timing."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def costing(self, seconds, fn):
        def probe(*args):
            self.now += seconds
            return fn(*args)
        return probe


@pytest.mark.parametrize("faster", ["compiled sum", "torch.sum"])
def test_the_read_probe_is_the_faster_of_the_compiled_sum_and_torch_sum(monkeypatch, faster):
    """The review measured torch.sum 11-18% faster than read_sum on an AVX-512 EPYC: the
    yardstick is whichever of the two reads faster in the same run, and the phrase says which,
    with both rates. The race is run on a fake clock here (no timed test)."""
    from course_utils.bench import decode_step
    from course_utils.bench.decode_step import make_read_probe

    buffer = torch.rand(100_003, generator=torch.Generator().manual_seed(0))
    clock = _FakeClock()
    ran = []
    real_sum = buffer.sum().item()

    def compiled_sum(address, n, threads):
        ran.append("compiled sum")
        return real_sum

    seconds = {"compiled sum": 2e-3, "torch.sum": 3e-3} if faster == "compiled sum" else \
        {"compiled sum": 3e-3, "torch.sum": 2e-3}
    flags = "-march=native -fopenmp"
    monkeypatch.setattr(decode_step, "_compiled_read_sum",
                        lambda: (clock.costing(seconds["compiled sum"], compiled_sum), flags))
    real_torch_sum = decode_step._torch_sum_on
    monkeypatch.setattr(decode_step, "_torch_sum_on", lambda buf, threads: clock.costing(
        seconds["torch.sum"], real_torch_sum(buf, threads)))
    probe, what = make_read_probe(buffer, 1, clock=clock)
    other = "torch.sum" if faster == "compiled sum" else "compiled sum"
    rates = {name: 100_003 * 4 / s / 1e9 for name, s in seconds.items()}
    assert what.startswith(f"{faster}, the faster in a race with {other} (best of "
                           f"{decode_step.PROBE_RACE_READS} reads each: {rates[faster]:.1f} vs "
                           f"{rates[other]:.1f} GB/s"), what
    assert "read_sum, -march=native -fopenmp" in what
    assert ran.count("compiled sum") == 1 + decode_step.PROBE_RACE_READS  # the check, then the race
    before = clock.now
    assert float(probe()) == pytest.approx(real_sum, rel=1e-5)
    assert clock.now - before == pytest.approx(seconds[faster])  # the probe returned is the winner


def test_the_race_alternates_the_probes_and_keeps_each_ones_best():
    from course_utils.bench.decode_step import _race

    clock, order = _FakeClock(), []
    costs = {"a": iter([5.0, 1.0, 3.0]), "b": iter([2.0, 4.0, 6.0])}

    def probe(name):
        def run():
            order.append(name)
            clock.now += next(costs[name])
        return run

    probes = {name: probe(name) for name in costs}
    assert _race(probes, clock, reads=3) == {"a": 1.0, "b": 2.0}
    assert order == ["a", "b", "b", "a", "a", "b"]


def test_the_read_probe_sums_the_buffer_and_falls_back_to_torch_sum_with_a_reason():
    from course_utils.bench.decode_step import make_read_probe

    buffer = torch.rand(100_003, generator=torch.Generator().manual_seed(0))
    probe, what = make_read_probe(buffer, 2)
    assert float(probe()) == pytest.approx(buffer.sum().item(), rel=1e-5)
    if fused_decode_status() is None:
        assert "the faster in a race with" in what and "fused_decode.c read_sum" in what, what
    else:
        assert what.startswith("torch.sum: ")
    strided, what = make_read_probe(buffer[::2])
    assert what.startswith("torch.sum (the buffer is not contiguous")


def test_a_share_above_the_read_only_bandwidth_gets_a_check_line():
    """A step (or the weights alone) reading faster than the probe: partly from the cache, or a
    slowed probe. The table says so, and names the conditions the shares hold under."""
    step = _whole_step({16: [2.0, 2.1, 2.2], 4: [1.9, 2.0, 2.1]})  # 112 MiB in 2 ms: 59 GB/s
    step = dataclasses.replace(step, weights_s={(1, 1024): [1.0e-3] * 3})  # 96 MiB in 1 ms: 101 GB/s
    text = step.format()
    flat = text.replace("\n    ", " ")
    assert "check: a step read faster than the read-only probe (B=1 context 1024 g=16 175%" in flat
    assert "check: the weights alone read faster than the read-only probe (B=1, context 1024 300%)" in flat
    assert "conditions: " in text and "thread" in text and "no embedding or LM head" in text
    assert max(len(line) for line in text.splitlines()) <= 100

    from course_utils.bench.gqa_speed import DecodeBench, DecodeRow

    row = DecodeRow(16, 256 * MiB, {"course": [0.002, 0.002]})  # 134 GB/s against a 33.6 GB/s probe
    attention = DecodeBench(16, 64, 4096, 8, 1, 1, [row], [0.01, 0.01], [], 0, read_s=[0.004] * 2,
                            read_bytes=128 * MiB, conditions="1 thread; test")
    assert any(w.startswith("check: share of the read-only bandwidth above 100% (course g=16 400%")
               for w in attention.noise_warnings())
    assert "conditions of every share below: 1 thread; test" in attention.format()


def test_bench_whole_step_names_flush_multiple_when_it_is_not_positive():
    with pytest.raises(ValueError, match="flush_multiple"):
        bench_whole_step(((1, 8),), (4, 1), num_heads=4, d_model=64, num_layers=1, repeats=1,
                         flush_multiple=0)
