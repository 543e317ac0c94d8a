"""Battery 15's findings in the benchmarks (issue 38, helper fix45b): each bad call now raises
with the argument's (or the record field's) name, what was expected and what arrived; the valid
call beside it still works."""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.bench import decode_step as DS
from course_utils.bench import gqa_speed as GS
from course_utils.bench import memory as MEM
from course_utils.bench import mha_speed as MS
from course_utils.bench import timing as TM

MiB = 2**20


def _decode_row(g: int = 4, samples=(2e-3, 3e-3)) -> GS.DecodeRow:
    return GS.DecodeRow(g, 1024 * g, {"course": list(samples)})


def _decode_bench(**changes) -> GS.DecodeBench:
    """A consistent DecodeBench, h = 4: rows at g = 4 and g = 1, two repeats; ``changes`` replace fields."""
    fields = dict(num_heads=4, d_head=16, context=8, num_layers=1, batch=1, threads=1,
                  rows=[_decode_row(4), _decode_row(1, (1e-3, 1.5e-3))], sdpa_mha_s=[2e-3, 2e-3], copy_s=[],
                  copy_bytes=0, read_s=[1e-3, 1e-3], read_bytes=MiB)
    return GS.DecodeBench(**{**fields, **changes})


def _step_row(g: int = 4, batch: int = 1, context: int = 8, samples=(1e-3, 2e-3)) -> DS.StepRow:
    # the bytes a SmallDecoder of _whole_step's sizes reads (WholeStep checks them)
    sizes = DS.decoder_bytes(64, 4, g, 1, context=context, batch=batch, mlp_ratio=4)
    return DS.StepRow(batch, context, g, *sizes, list(samples))


def _whole_step(**changes) -> DS.WholeStep:
    """A consistent WholeStep, h = 4: one shape, rows at g = 4 and g = 1; ``changes`` replace fields."""
    fields = dict(d_model=64, num_heads=4, num_layers=1, mlp_ratio=4, weight_dtype=torch.float32,
                  attention="course", threads=1, rows=[_step_row(4), _step_row(1)], read_s=[1e-3],
                  read_bytes=MiB, llc=(MiB, "test"), flush_bytes=4 * MiB, weights_s={(1, 8): [1e-3, 1e-3]})
    return DS.WholeStep(**{**fields, **changes})


# -- 1. result records refuse zero and absurd sizes, counts, thread counts and times ------------------
RECORD_CASES = [
    Case("DecodeBench context 0", lambda: _decode_bench(context=0), ValueError,
         ["DecodeBench.context", "positive int", "got 0"]),
    Case("DecodeBench threads 0", lambda: _decode_bench(threads=0), ValueError,
         ["DecodeBench.threads", "positive int", "got 0"]),
    Case("DecodeBench sdpa time 0", lambda: _decode_bench(sdpa_mha_s=[2e-3, 0.0]), ValueError,
         ["DecodeBench.sdpa_mha_s[1]", "> 0", "0.0"]),
    Case("DecodeBench read probe of 0 bytes", lambda: _decode_bench(read_bytes=0), ValueError,
         ["DecodeBench.read_bytes", "> 0", "read_s", "got 0"]),
    Case("DecodeBench no g = h row", lambda: _decode_bench(rows=[_decode_row(1)]), ValueError,
         ["DecodeBench.rows", "num_heads=4", "got g = [1]"]),
    Case("DecodeBench g not a divisor", lambda: _decode_bench(rows=[_decode_row(4), _decode_row(3)]),
         ValueError, ["DecodeBench.rows", "divisor", "[4, 3]"]),
    Case("DecodeBench repeats disagree",
         lambda: _decode_bench(rows=[_decode_row(4), _decode_row(1, (1e-3,))]), ValueError,
         ["DecodeBench.rows[g=1].samples_s", "2 samples", "{'course': 1}"]),
    Case("DecodeRow g 0", lambda: GS.DecodeRow(0, 100), ValueError,
         ["DecodeRow.num_kv_heads", "positive int", "got 0"]),
    Case("DecodeRow cache 0 bytes", lambda: GS.DecodeRow(4, 0), ValueError,
         ["DecodeRow.cache_bytes", "positive int", "got 0"]),
    Case("DecodeRow step of 0 s", lambda: _decode_row(4, (1e-3, 0.0)), ValueError,
         ["DecodeRow.samples_s['course'][1]", "> 0", "0.0"]),
    Case("StageRow g 0", lambda: GS.StageRow("scores", 0, 1e-3, 100), ValueError,
         ["StageRow.num_kv_heads", "positive int", "got 0"]),
    Case("StageRow 0 bytes", lambda: GS.StageRow("scores", 4, 1e-3, 0), ValueError,
         ["StageRow.bytes_moved", "positive int", "got 0"]),
    Case("StepRow batch 0", lambda: DS.StepRow(0, 8, 4, 100, 100), ValueError,
         ["StepRow.batch", "positive int", "got 0"]),
    Case("StepRow cache 0 bytes", lambda: DS.StepRow(1, 8, 4, 100, 0), ValueError,
         ["StepRow.cache_bytes", "positive int", "got 0"]),
    Case("StepRow step of 0 s", lambda: _step_row(samples=(0.0,)), ValueError,
         ["StepRow.samples_s[0]", "> 0", "0.0"]),
    Case("WholeStep threads 0", lambda: _whole_step(threads=0), ValueError,
         ["WholeStep.threads", "positive int", "got 0"]),
    Case("WholeStep mlp_ratio 0", lambda: _whole_step(mlp_ratio=0), ValueError,
         ["WholeStep.mlp_ratio", "positive int", "got 0"]),
    Case("WholeStep probe of 0 s", lambda: _whole_step(read_s=[0.0]), ValueError,
         ["WholeStep.read_s[0]", "> 0", "0.0"]),
    Case("WholeStep weights of 0 s", lambda: _whole_step(weights_s={(1, 8): [0.0]}), ValueError,
         ["WholeStep.weights_s[(1, 8)]", "> 0", "0.0"]),
    Case("WholeStep shape without g = h", lambda: _whole_step(rows=[_step_row(1)]), ValueError,
         ["WholeStep.rows", "batch=1, context=8", "g=4", "{1: 2}"]),
    Case("WholeStep weights of a shape not run", lambda: _whole_step(weights_s={(2, 8): [1e-3]}), ValueError,
         ["WholeStep.weights_s", "(2, 8)"]),
    Case("Timing ratio 0", lambda: TM.Timing("a", 1e-3, 0.0, [1e-3]), ValueError,
         ["Timing('a').ratio", "> 0", "0.0"]),
    Case("Timing median 0", lambda: TM.Timing("a", 0.0, 1.0, [0.0]), ValueError,
         ["Timing('a').median_s", "> 0", "0.0"]),
    Case("NotebookMemory peak 0 MB", lambda: MEM.NotebookMemory("n.ipynb", 0.0, 1.0), ValueError,
         ["NotebookMemory.peak_mb", "> 0", "0.0"]),
    Case("DeviceComparison tolerance 0", lambda: MS.DeviceComparison(
        "t", [TM.Timing("nn.MultiheadAttention", 1e-3, 1.0, [1e-3])], {"x": 0.0}, 0.0, 1.0, {"x": True}),
         ValueError, ["DeviceComparison.tolerance", "> 0", "0.0"]),
]


@pytest.mark.parametrize("case", RECORD_CASES, ids=lambda c: c.name)
def test_records_refuse_zero_sizes_counts_and_times(case: Case) -> None:
    assert_named(case)


def test_the_valid_records_beside_them_are_made() -> None:
    bench, whole = _decode_bench(), _whole_step()
    assert bench.speedup(1) == pytest.approx(2.0) and whole.speedup(1, 8, 1) == pytest.approx(1.0)
    assert TM.Timing("a", 1e-3, 1.0, [0.0, 1e-3, 2e-3]).best_s == 0.0  # one sample may read 0 s
    assert MEM.CellTime(0, 0.0, "x = 1").seconds == 0.0
    assert MEM.NotebookMemory("n", None, 0.5, "KeyError: k").verdict


def test_a_timing_run_whose_clock_never_advanced_names_the_function() -> None:
    """time_interleaved refused a zero baseline median; another function's zero median now too
    (its Timing would refuse it with a less helpful message)."""
    clock = iter([0.0, 1.0, 5.0, 5.0] * 3)  # a: 1 s per call, b: 0 s
    with pytest.raises(ValueError, match=r"'b' took a median of 0\.0 s over 3 repeats"):
        TM.time_interleaved({"a": lambda: None, "b": lambda: None}, baseline="a", repeats=3, warmup=0,
                            progress=None, clock=lambda: next(clock))


# -- 2. bool flags of the bench functions refuse a truthy string ---------------------------------------
FLAG_CASES = [
    Case("bench_decode full 'yes'", lambda: GS.bench_decode(full="yes"), TypeError,
         ["full", "True or False", "str 'yes'"]),
    Case("bench_decode progress 1", lambda: GS.bench_decode(progress=1), TypeError,
         ["progress", "True or False", "int 1"]),
    Case("bench_whole_step full 'yes'", lambda: DS.bench_whole_step(full="yes"), TypeError,
         ["full", "True or False", "str 'yes'"]),
    Case("bench_whole_step progress 'no'", lambda: DS.bench_whole_step(progress="no"), TypeError,
         ["progress", "True or False", "str 'no'"]),
    Case("bench_mha lesson 'no'", lambda: MS.bench_mha(1, 4, 8, 2, lesson="no"), TypeError,
         ["lesson", "True or False", "str 'no'"]),
    Case("plot_sweep logy 'no'", lambda: _plot_sweep(logy="no"), TypeError,
         ["logy", "True or False", "str 'no'"]),
]


def _plot_sweep(**kwargs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, ax = plt.subplots()
    try:
        return MS.plot_sweep(pd.DataFrame({"a": [1.0, 2.0]}, index=pd.Index([1, 2], name="batch")), ax,
                             title="t", **kwargs)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("case", FLAG_CASES, ids=lambda c: c.name)
def test_bench_flags_refuse_what_is_not_a_bool(case: Case) -> None:
    assert_named(case)


# -- 3. WholeStep's lookups take ints and a StepRow -----------------------------------------------
LOOKUP_CASES = [
    Case("speedup batch True", lambda: _whole_step().speedup(True, 8, 1), TypeError,
         ["batch", "int", "bool True"]),
    Case("speedup batch 1.0", lambda: _whole_step().speedup(1.0, 8, 1), TypeError,
         ["batch", "int", "float 1.0"]),
    Case("weights_gb_per_s batch True", lambda: _whole_step().weights_gb_per_s(True, 8), TypeError,
         ["batch", "int", "bool True"]),
    Case("weights_gb_per_s context 8.0", lambda: _whole_step().weights_gb_per_s(1, 8.0), TypeError,
         ["context", "int", "float 8.0"]),
    Case("weights_gb_per_s shape without weights", lambda: _whole_step(weights_s={}).weights_gb_per_s(1, 8),
         ValueError, ["batch=1, context=8", "none"]),
    Case("byte_bound g True", lambda: _whole_step().byte_bound(1, 8, True), TypeError,
         ["num_kv_heads", "int", "bool True"]),
    Case("row not measured", lambda: _whole_step().row(1, 8, 2), ValueError,
         ["g=2", "(1, 8, 4)", "(1, 8, 1)"]),
    Case("read_share of an int", lambda: _whole_step().read_share(3), TypeError, ["row", "StepRow", "int 3"]),
    Case("read_share of a tuple", lambda: _whole_step().read_share((1, 8, 4)), TypeError,
         ["row", "StepRow", "tuple"]),
]


@pytest.mark.parametrize("case", LOOKUP_CASES, ids=lambda c: c.name)
def test_whole_step_lookups_are_checked(case: Case) -> None:
    assert_named(case)


# -- 4. DecodeBench's lookups name the method or g asked for and those measured -----------------------
DECODE_LOOKUP_CASES = [
    Case("ratio_to_sdpa method", lambda: _decode_bench().ratio_to_sdpa("fused"), ValueError,
         ["method", "['course']", "'fused'"]),
    Case("speedup method", lambda: _decode_bench().speedup(1, "repeat"), ValueError,
         ["method", "['course']", "'repeat'"]),
    Case("speedup g", lambda: _decode_bench().speedup(2), ValueError, ["num_kv_heads", "[4, 1]", "got 2"]),
    Case("speedup g bool", lambda: _decode_bench().speedup(True), TypeError, ["num_kv_heads", "int", "bool"]),
    Case("speedup_over_fastest_mha method", lambda: _decode_bench().speedup_over_fastest_mha(1, "fused"),
         ValueError, ["method", "['course']", "'fused'"]),
    Case("read_share method", lambda: _decode_bench().read_share(1, "enable_gqa"), ValueError,
         ["method", "['course']", "'enable_gqa'"]),
]


@pytest.mark.parametrize("case", DECODE_LOOKUP_CASES, ids=lambda c: c.name)
def test_decode_bench_lookups_name_what_was_measured(case: Case) -> None:
    assert_named(case)


def test_decode_bench_lookups_still_answer() -> None:
    bench = _decode_bench()
    assert bench.ratio_to_sdpa() == pytest.approx(1.25)
    assert bench.speedup_over_fastest_mha(1, "course") == pytest.approx(5 / 3)  # medians of 2 and 4/3


# -- 5. forward_callables checks x's width against every module's, before anything is timed -----------
def test_forward_callables_refuses_x_of_the_wrong_width_up_front() -> None:
    modules = MS.lesson_implementations(32, 4)
    with pytest.raises(ValueError) as info:
        MS.forward_callables(modules, torch.randn(1, 3, 16))
    assert "x (for modules['loop over heads'])" in str(info.value) and "d_model=32" in str(info.value)
    assert "(1, 3, 16)" in str(info.value)
    with pytest.raises(ValueError, match=r"modules\[\"torch's\"\].*d_model=32"):
        MS.forward_callables({"torch's": modules["nn.MultiheadAttention"]}, torch.randn(1, 3, 16))
    calls = MS.forward_callables(modules, torch.randn(1, 3, 32))  # the right width still runs
    assert all(fn().shape == (1, 3, 32) for fn in calls.values())


# -- 6. the command line names an empty or white-space word as one, in every subcommand ---------------
@pytest.mark.parametrize(("argv", "named"), [
    ([""], "choose a subcommand"),
    ([" "], "choose a subcommand"),
    (["mha", ""], "mha takes no such argument"),
    (["gqa", " "], "gqa takes no such argument"),
    (["train", ""], "train takes no such argument"),
    (["mha", "--device", " "], "argument --device"),
    (["train", "--device="], "argument --device"),
    (["memory", ""], "argument notebooks"),
    (["memory", " "], "argument notebooks"),
    (["test-memory", ""], "argument report"),
    (["test-memory", "\t"], "argument report"),
], ids=repr)
def test_bench_command_line_names_an_empty_word(argv: list[str], named: str, capsys) -> None:
    from course_utils.bench import cli as bench_cli

    word = argv[-1].partition("=")[2] if "=" in argv[-1] else argv[-1]
    with pytest.raises(SystemExit) as info:
        bench_cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert named in err and f"an empty word {word!r}" in err, err


# -- 7. bench memory interrupted once its kernel runs says one line, and leaves no file -------------
def _children(pid: int) -> list[str]:
    try:
        return open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return []


def _wait_for(condition, proc, seconds: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the benchmark never got there (exit {proc.returncode}): {out} {err}")
        time.sleep(0.05)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="/proc, POSIX signals")
@pytest.mark.parametrize("when", ["kernel started", "cell running"])
def test_bench_memory_interrupted_prints_only_its_one_line(tmp_path, when: str) -> None:
    """The shutdown after SIGINT interrupts the kernel, whose own traceback (KeyboardInterrupt
    while it imports, a ZMQError once a cell runs) used to reach the terminal before the tool's
    one line."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import nbformat

    cell = "open('started', 'w').close()\nimport time\ntime.sleep(120)"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), tmp_path / "slow.ipynb")
    root = str(Path(__file__).resolve().parents[1])  # this checkout's course_utils, from tmp_path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "course_utils.bench", "memory", "slow.ipynb", "--slowest", "0"]
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    if when == "kernel started":
        _wait_for(lambda: _children(proc.pid), proc)  # the kernel process exists, still importing
    else:
        _wait_for((tmp_path / "started").exists, proc)
    os.kill(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running 120 s after SIGINT: {proc.communicate()}")
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines() == ["python -m course_utils.bench: interrupted by SIGINT: the kernel "
                                        "running slow.ipynb was shut down; nothing was written"], err
    assert {p.name for p in tmp_path.iterdir()} - {"started"} == {"slow.ipynb"}  # the cell's marker only
