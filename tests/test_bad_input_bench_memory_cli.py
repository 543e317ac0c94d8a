"""Bad input to the benchmark's memory reports and command line: course_utils.bench.memory
(notebook peak memory, report records, test-memory), course_utils.bench.cli (options given twice,
negative or huge shapes, interruptions that must print one line) and train_speed. Malformed
report files, non-numeric peaks, timeouts out of range, and options that do not fit together.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

import pandas as pd
import pytest
import torch
from bad_input_cases import ROOT, Case, assert_named, raises_naming, refused

from course_utils.attention import validation as va
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.shapes import TraceStep
from course_utils.attention.validation import check_record
from course_utils.bench import cli, decode_step, gqa_speed, memory, mha_speed, timing, train_speed
from course_utils.bench import cli as bench_cli
from course_utils.bench import gqa_speed as GS
from course_utils.bench import mha_speed as MS
from course_utils.bench import timing as TI
from course_utils.bench import train_speed as TS
from course_utils.bench.cli import main as bench_main
from course_utils.bench.memory import (
    NotebookMemory,
    format_memory_table,
    format_test_report,
    notebook_peak_memory,
    read_test_report,
)
from course_utils.bench.timing import RatioSpread
from course_utils.bench.train_speed import format_training_table
from course_utils.model import train as TRN

# -- battery 5 ---------------------------------------------------------------------------------------

T1 = [TI.Timing("a", 1.0, 1.0, [1.0]), TI.Timing("b", 2.0, 2.0, [2.0])]


def _backwards_clock():
    readings = iter(range(100, 0, -1))
    return lambda: next(readings)


BENCH_CASES = [
    Case("Timing/negative", lambda: TI.Timing("a", -1.0, 1.0, [-1.0]), ValueError,
         ["Timing('a').median_s", "> 0", "-1.0"]),
    Case("Timing/nan sample", lambda: TI.Timing("a", 1.0, 1.0, [float("nan")]), ValueError,
         ["samples_s[0]", "finite", "nan"]),
    Case("interleaved/clock backwards",
         lambda: TI.interleaved_samples({"a": lambda: 1}, repeats=2, warmup=0, clock=_backwards_clock()),
         ValueError, ["clock", "never decrease", "100 then 99"]),
    Case("interleaved/clock nan",
         lambda: TI.interleaved_samples({"a": lambda: 1}, repeats=2, warmup=0, clock=lambda: float("nan")),
         ValueError, ["clock", "nan then nan"]),
    Case("format_table/baseline missing", lambda: TI.format_table("t", T1, "zz"), ValueError,
         ["baseline 'zz'", "['a', 'b']"]),
    Case("format_spread_table/empty", lambda: TI.format_spread_table("t", [], "a"), ValueError,
         ["timings", "non-empty", "list"]),
    Case("format_table/not Timing", lambda: TI.format_table("t", [1], "a"), TypeError,
         ["timings[0]", "Timing", "int"]),
    Case("bench_decode/copy_mib neg",
         lambda: GS.bench_decode(4, 8, 16, 1, [4], copy_mib=-1, repeats=2, warmup=0, progress=False),
         ValueError, ["copy_mib", ">= 0", "-1"]),
    Case("bench_mha/target nan", lambda: MS.bench_mha(1, 4, 8, 2, repeats=2, target_sample_s=float("nan")),
         ValueError, ["target_sample_s", "finite", "nan"]),
    Case("plot_sweep/not table", lambda: MS.plot_sweep([1, 2], None, title="t"), TypeError,
         ["table", "DataFrame", "list"]),
    Case("bench_training/seeds empty", lambda: TS.bench_training(()), ValueError, ["seeds", "at least one"]),
    Case("bench_training/seeds dup", lambda: TS.bench_training((1, 1)), ValueError, ["seeds", "distinct"]),
    Case("bench_training/steps 0", lambda: TS.bench_training((0,), induction_max_steps=0), ValueError,
         ["induction_max_steps", "1..100000", "got 0"]),
    Case("format_training_table/bad rows", lambda: TS.format_training_table([{"x": 1}]), ValueError,
         ["rows[0]", "'seed'", "['x']"]),
    Case("format_training_table/empty", lambda: TS.format_training_table([]), ValueError,
         ["rows", "non-empty"]),
]


@pytest.mark.parametrize("case", BENCH_CASES, ids=lambda c: c.name)
def test_bench_bad_input_is_named(case):
    assert_named(case)


def test_bench_cli_names_a_negative_shape(capsys):
    with pytest.raises(SystemExit) as info:
        bench_main(["gqa", "--shapes", "-1x1024"])
    assert info.value.code == 2 and "--shapes" in (err := capsys.readouterr().err) and "'-1x1024'" in err


# -- battery 6 (reports) -----------------------------------------------------------------------------

def test_a_report_record_without_a_numeric_peak_is_named(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"tests": {"a": {"peak_rss_mb": "x"}}}))
    with pytest.raises(ValueError, match=r"record of 'a' has no numeric 'peak_mb'"):
        read_test_report(report)
    with pytest.raises(ValueError, match=r"tests: the record of 'a'"):
        format_test_report({"a": {}})
    with pytest.raises(TypeError, match="tests must be a dict"):
        format_test_report(5)
    assert "1 tests; 0 over" in format_test_report({"a": {"peak_mb": 100.0, "start_mb": 90.0}})


def test_memory_table_rows_must_be_measurements():
    with pytest.raises(TypeError, match="rows must be a list of NotebookMemory"):
        format_memory_table([5])


def test_a_file_that_is_not_a_notebook_is_named(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{")
    with pytest.raises(ValueError, match=r"bad\.ipynb is not a notebook"):
        notebook_peak_memory(bad)


# -- battery 7 (b) -----------------------------------------------------------------------------------

# -- the bench CLI: notebooks that are no notebook files (rows 19, 55), repeated values (row 20) --
def _bench(argv: list[str], capsys) -> tuple[int, str, str]:
    from course_utils.bench.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_bench_memory_says_a_fifo_is_a_fifo(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.ipynb")
    code, out, err = _bench(["memory", str(tmp_path / "pipe.ipynb")], capsys)
    assert code == 2 and out == ""
    assert "pipe.ipynb', which is a FIFO (named pipe)" in err and "no notebook file" not in err


def test_bench_memory_refuses_json_that_is_no_notebook_when_parsed(tmp_path, capsys):
    (tmp_path / "b.ipynb").write_text('{"cells": 3}')
    code, out, err = _bench(["memory", str(tmp_path / "b.ipynb")], capsys)
    assert code == 2 and out == "" and "b.ipynb is not a notebook nbformat can read" in err


@pytest.mark.parametrize("text", ['{"cells": 3}', '{"cells": [3]}', "[1, 2]",
                                  '{"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, '
                                  '"metadata": {}}'])
def test_notebook_peak_memory_names_a_file_that_is_no_notebook(tmp_path, text):
    from course_utils.bench.memory import notebook_peak_memory

    (tmp_path / "b.ipynb").write_text(text)
    with pytest.raises(ValueError, match=r"b\.ipynb is not a notebook nbformat can read \("):
        notebook_peak_memory(tmp_path / "b.ipynb")


def test_notebook_peak_memory_names_what_its_path_is(tmp_path):
    from course_utils.bench.memory import notebook_peak_memory

    with pytest.raises(ValueError, match="which is a directory"):
        notebook_peak_memory(tmp_path)
    with pytest.raises(TypeError, match="path must be a str or Path .*got int 3"):
        notebook_peak_memory(3)


def test_format_slowest_cells_names_a_row_that_is_no_notebook_memory():
    from course_utils.bench.memory import CellTime, NotebookMemory, format_slowest_cells

    with pytest.raises(TypeError, match="row must be a NotebookMemory .*got str 'x'"):
        format_slowest_cells("x")
    row = NotebookMemory("n.ipynb", 1.0, 3.0, cells=[CellTime(0, 2.0, "x = 1")])
    assert "n.ipynb: 1 code cells" in format_slowest_cells(row)


@pytest.mark.parametrize("argv, words", [
    (["train", "--seeds", "0", "0", "--induction-max-steps", "1", "--agreement-steps", "1"],
     ["--seeds", "distinct", "got 0 more than once"]),
    (["train", "--seeds", "2", "1", "2", "1"], ["--seeds", "got 2, 1 more than once"]),
    (["gqa", "--shapes", "1x8", "2x8", "1x8"], ["--shapes", "got 1x8 more than once"]),
])
def test_bench_refuses_repeated_values_when_parsed(argv, words, capsys):
    """Row 20: a usage error (exit 2) before the header is printed, not a traceback after it."""
    code, out, err = _bench(argv, capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert all(w in last for w in words), last


def test_bench_takes_distinct_seeds():
    from course_utils.bench.cli import build_parser

    assert build_parser().parse_args(["train", "--seeds", "3", "1"]).seeds == [3, 1]


# -- battery 8 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["mha", "--repeats", str(10**30)], ["gqa", "--repeats", "10001"]])
def test_bench_repeats_have_a_ceiling(command, capsys):
    """Battery 8: `bench mha --repeats 10**30` was accepted and ran until killed."""
    from course_utils.bench.cli import main

    with pytest.raises(SystemExit) as info:
        main(command)
    assert info.value.code == 2 and "expected at most 10,000 repeats" in capsys.readouterr().err


# -- battery 9 ---------------------------------------------------------------------------------------

def test_bench_train_seeds_beyond_torch_are_refused_when_parsed(capsys):
    from course_utils.bench.cli import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--seeds", str(2**70), "--induction-max-steps", "1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--seeds" in err and "0..2**64-1" in err and str(2**70) in err, err


# -- battery 9b --------------------------------------------------------------------------------------

# -- 2. hangs: every count option has a ceiling when parsed ---------------------------------------
@pytest.mark.parametrize("option", ["--agreement-steps", "--induction-max-steps"])
def test_bench_train_steps_beyond_the_ceiling_are_refused_when_parsed(option, capsys, monkeypatch):
    """`bench train --agreement-steps 10**12` was accepted and trained until killed."""
    from course_utils.bench import train_speed
    from course_utils.bench.cli import main

    monkeypatch.setattr(train_speed, "bench_training", lambda *a, **k: pytest.fail("it trained"))
    with pytest.raises(SystemExit) as stop:
        main(["train", option, str(10**12), "--seeds", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "at most 100,000 steps" in err and "'1000000000000'" in err, err


def test_bench_memory_timeout_has_a_ceiling(capsys):
    from course_utils.bench.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["memory", "--timeout", str(10**30)])
    err = capsys.readouterr().err
    assert "--timeout" in err and "at most 604,800 seconds" in err, err
    assert build_parser().parse_args(["memory", "--timeout", "60"]).timeout == 60


# -- battery 10 --------------------------------------------------------------------------------------

# -- 3. developer-facing helpers: the same, for calls by hand ----------------------------------
W = torch.ones(2, 2)


X = torch.ones(1, 2, 2)


DEVELOPER = [
    ("check_kv_heads num_heads str", lambda: va.check_kv_heads(1, "3"), TypeError,
     ["num_heads", "int", "str '3'"]),
    ("check_kv_heads num_heads nan", lambda: va.check_kv_heads(1, math.nan), TypeError,
     ["num_heads", "int", "float nan"]),
    ("check_index size str", lambda: va.check_index(1, "i", "3"), TypeError, ["size", "int", "str '3'"]),
    ("check_device_present bogus str", lambda: va.check_device_present("gpu9"), ValueError,
     ["device", "'cpu', 'cuda' or 'cuda:0'", "'gpu9'"]),
    ("check_device_present float", lambda: va.check_device_present(3.5), TypeError,
     ["device", "torch.device or a str", "float 3.5"]),
    ("check_matches_module x None", lambda: va.check_matches_module(None, "x", W), TypeError,
     ["x", "torch.Tensor", "NoneType"]),
    ("check_matches_module weight None", lambda: va.check_matches_module(W, "x", None), TypeError,
     ["weight", "torch.Tensor", "NoneType"]),
    ("check_mha_inputs key None",
     lambda: va.check_mha_inputs(X, None, X, d_model=2, weight=W, is_causal=False, need_weights=False),
     TypeError,
     ["key", "torch.Tensor", "NoneType"]),
    ("check_mha_tensors value None", lambda: va.check_mha_tensors(X, X, None, d_model=2, weight=W), TypeError,
     ["value", "torch.Tensor", "NoneType"]),
    ("check_table columns int", lambda: va.check_table(pd.DataFrame(), "t", 5), TypeError,
     ["columns", "tuple of column names", "int 5"]),
    ("check_linear_weights_fit widths str", lambda: va.check_linear_weights_fit(2, "abc"), TypeError,
     ["widths", "list of ints", "str 'abc'"]),
    ("check_linear_weights_fit widths [None]", lambda: va.check_linear_weights_fit(2, [None]), TypeError,
     ["widths[0]", "int", "NoneType"]),
    ("check_linear_weights_fit widths int", lambda: va.check_linear_weights_fit(2, 5), TypeError,
     ["widths", "list of ints", "int 5"]),
    ("positive_int int", lambda: cli.positive_int(5), TypeError, ["positive_int", "a str", "int 5"]),
    ("non_negative_int None", lambda: cli.non_negative_int(None), TypeError,
     ["non_negative_int", "a str", "NoneType"]),
    ("seed_number int", lambda: cli.seed_number(5), TypeError, ["seed_number", "a str", "int 5"]),
    ("device_name None", lambda: cli.device_name(None), TypeError, ["device_name", "a str", "NoneType"]),
    ("batch_by_context int", lambda: cli.batch_by_context(5), TypeError,
     ["batch_by_context", "a str", "int 5"]),
    ("Distinct key int", lambda: cli.Distinct(key=5), TypeError, ["Distinct's key", "function", "int 5"]),
    ("gqa add_bench_parser None", lambda: gqa_speed.add_bench_parser(None), TypeError,
     ["subparsers", "add_subparsers()", "'gqa'", "NoneType"]),
    ("memory add_bench_parser str", lambda: memory.add_bench_parser("x"), TypeError,
     ["subparsers", "'memory'", "str 'x'"]),
    ("mha add_bench_parser int", lambda: mha_speed.add_bench_parser(5), TypeError,
     ["subparsers", "'mha'", "int 5"]),
    ("train add_bench_parser None", lambda: train_speed.add_bench_parser(None), TypeError,
     ["subparsers", "'train'", "NoneType"]),
    ("forward_callables modules int", lambda: mha_speed.forward_callables(5, X), TypeError,
     ["modules", "dict {label: nn.Module}", "int 5"]),
    ("forward_callables x None", lambda: mha_speed.forward_callables({}, None), TypeError,
     ["x", "torch.Tensor", "NoneType"]),
    ("read_test_report int", lambda: memory.read_test_report(5), TypeError,
     ["path", "str or Path naming the per-test memory report", "int 5"]),
    ("notebook_file None", lambda: memory.notebook_file(None), TypeError,
     ["text", "str or Path naming a lesson notebook", "NoneType"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in DEVELOPER], ids=[c[0] for c in DEVELOPER])
def test_developer_facing_helpers_name_a_wrong_argument(call, error, words):
    refused(call, error, words)


def test_developer_facing_helpers_still_accept_good_input():
    assert va.check_kv_heads(2, 4) == 2
    assert va.check_device_present("cpu") == torch.device("cpu")
    assert cli.positive_int("4") == 4 and cli.batch_by_context("1x8") == (1, 8)
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", nargs="+", action=cli.Distinct, key=str)
    assert parser.parse_args(["--n", "1", "2"]).n == ["1", "2"]
    memory.add_bench_parser(argparse.ArgumentParser().add_subparsers())
    assert set(mha_speed.forward_callables({"a": MultiHeadAttention(2, 1)}, X)) == {"a"}


# -- battery 11 --------------------------------------------------------------------------------------

def test_the_cli_and_the_functions_share_one_cap():
    assert cli.repeat_count(str(timing.MAX_REPEATS)) == timing.MAX_REPEATS
    with pytest.raises(argparse.ArgumentTypeError, match=f"{timing.MAX_REPEATS:,}"):
        cli.repeat_count(str(timing.MAX_REPEATS + 1))
    assert timing.check_round_counts(timing.MAX_REPEATS, timing.MAX_REPEATS, timing.MAX_REPEATS) == (
        timing.MAX_REPEATS, timing.MAX_REPEATS, timing.MAX_REPEATS)


# -- battery 13 --------------------------------------------------------------------------------------

# -- the training loop checks progress before it trains (bench_training(progress=1) ran on) ----
TRAIN_CASES = [
    Case("bench_training/progress int", lambda: TS.bench_training(progress=1), TypeError,
         ["progress", "True or False", "int 1"]),
    Case("train_induction/progress str", lambda: TRN.train_induction(steps=1, progress="no"), TypeError,
         ["progress", "True or False", "str 'no'"]),
]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=lambda c: c.name)
def test_training_refuses_a_progress_that_is_no_bool(case):
    assert_named(case)


# -- battery 13b -------------------------------------------------------------------------------------

def test_bench_gqa_refuses_a_shape_too_large_for_memory_when_parsed(capsys):
    """b13 cli:bench gqa-shapes-huge: the decode benchmark ran 13 s, then a traceback from
    check_fits_in_memory in SmallDecoder.__init__ (exit 1)."""
    from course_utils.bench import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(["gqa", "--shapes", "1x64", "1024x65536"])
    err = capsys.readouterr()
    assert stopped.value.code == 2 and err.out == "", err
    assert "--shapes 1024x65536 asks for" in err.err and "more than this machine's" in err.err, err.err
    assert "Traceback" not in err.err


def test_bench_gqa_default_options_pass_the_memory_check():
    from course_utils.bench import cli

    for argv in (["gqa"], ["gqa", "--full"], ["gqa", "--shapes", "1x1024", "8x4096"]):
        args = cli.build_parser().parse_args(argv)
        assert args.check(args) is None


# -- battery 14 (fix44b) -----------------------------------------------------------------------------

# -- an option given twice is refused by the shared parser (argparse kept the last) -----------
@pytest.mark.parametrize("argv, named", [
    (["mha", "--repeats", "1", "--repeats", "2"], "argument --repeats: given more than once (1, then 2)"),
    (["mha", "--repeats=1", "--rep", "3"], "argument --repeats: given more than once (1, then 3)"),
    (["gqa", "--whole-step", "--no-whole-step"],
     "argument --whole-step/--no-whole-step: given more than once"),
    (["train", "--seeds", "0", "--seeds", "1"], "argument --seeds: given more than once (0, then 1)"),
])
def test_bench_option_given_twice_is_refused(argv, named, capsys):
    with pytest.raises(SystemExit) as info:
        bench_cli.build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and named in err, err


# -- options that would be dropped without a word are refused --------------------------------
@pytest.mark.parametrize("argv, named", [
    (["gqa", "--bf16", "--no-whole-step"], "--bf16 would be ignored"),
    (["gqa", "--shapes", "1x64", "--no-whole-step"], "--shapes would be ignored"),
])
def test_bench_gqa_refuses_whole_step_options_without_the_whole_step(argv, named, capsys):
    with pytest.raises(SystemExit) as info:
        bench_cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and named in err and "--no-whole-step" in err, err


def test_bench_gqa_check_takes_bf16_with_the_whole_step():
    from course_utils.bench import gqa_speed

    args = bench_cli.build_parser().parse_args(["gqa", "--bf16", "--context", "64", "--layers", "1"])
    gqa_speed._check_gqa_fits(args)  # no error: --bf16 has a whole step to shape


# -- battery 15 (fix45b) -----------------------------------------------------------------------------

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

    import nbformat

    cell = "open('started', 'w').close()\nimport time\ntime.sleep(120)"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), tmp_path / "slow.ipynb")
    root = str(ROOT)  # this checkout's course_utils, from tmp_path
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


# -- battery 16 (fix46s) -----------------------------------------------------------------------------

# -- bench.memory: NotebookMemory and the per-test report accepted inconsistent or NaN values --
def _memory():
    from course_utils.bench import memory

    return memory


@pytest.mark.parametrize(("make", "words"), [
    (lambda: _memory().NotebookMemory("x", None, 1.0), ["NotebookMemory('x')", "peak_mb=None", "error=''"]),
    (lambda: _memory().NotebookMemory("x", 1.0, 1.0, "KeyError: k"), ["NotebookMemory('x')", "peak_mb=1.0"]),
    (lambda: _memory().NotebookMemory("x", 1.0, 3.0, cells=[_memory().CellTime(0, 1.0, "a")] * 2),
     ["NotebookMemory('x').cells", "[0, 0]"]),
    (lambda: _memory().NotebookMemory("x", 1.0, 1.0, cells=[_memory().CellTime(0, 50.0, "a")]),
     ["NotebookMemory('x').cells", "seconds=1.0", "50.0"]),
    (lambda: _memory().format_test_report({"a": {"peak_mb": math.nan}}), ["'a'", "peak_mb=nan"]),
    (lambda: _memory().format_test_report({"a": {"peak_mb": 5.0, "start_mb": math.inf}}),
     ["'a'", "start_mb=inf"]),
    (lambda: _memory().format_test_report({"a": {"peak_mb": 0.0}}), ["'a'", "peak_mb=0.0", "> 0"]),
])
def test_inconsistent_memory_records_are_refused(make, words) -> None:
    refused(make, ValueError, words)


def test_read_test_report_refuses_a_nan_peak(tmp_path) -> None:
    report = tmp_path / "peaks.json"
    report.write_text('{"tests": {"a": {"peak_mb": NaN}}}', encoding="utf-8")  # what json.dumps writes
    before = report.read_bytes()
    refused(lambda: _memory().read_test_report(report), ValueError, [str(report), "'a'", "peak_mb=nan"])
    assert report.read_bytes() == before
    report.write_text('{"tests": {"a": {"peak_mb": 12.5, "start_mb": null, "seconds": 0.5}}}',
                      encoding="utf-8")
    assert "12 MB" in _memory().format_test_report(_memory().read_test_report(report))


# -- battery 18 (fix48s) -----------------------------------------------------------------------------

MHA = "nn.MultiheadAttention"


# -- valid records, one of each ---------------------------------------------------------------
def _timing() -> timing.Timing:
    return timing.Timing("a", 1e-3, 1.0, [1e-3, 2e-3, 1e-3])


def _spread() -> timing.RatioSpread:
    return timing.RatioSpread("b", "a", 1.0, 0.9, 1.1, 0.8, 1.2, 5)


def _notebook() -> memory.NotebookMemory:
    return memory.NotebookMemory("a.ipynb", 500.0, 10.0, cells=[memory.CellTime(0, 1.0, "x = 1")])


def _step_row(g: int = 4) -> decode_step.StepRow:
    sizes = decode_step.decoder_bytes(64, 4, g, 1, context=8, batch=1, mlp_ratio=4)  # _whole_step's
    return decode_step.StepRow(1, 8, g, *sizes, [1e-3, 2e-3])


def _whole_step() -> decode_step.WholeStep:
    return decode_step.WholeStep(64, 4, 1, 4, torch.float32, "course", 1, [_step_row(4), _step_row(1)],
                                 [1e-3], 2**20, (2**20, "test"), 2**22, {(1, 8): [1e-3, 1e-3]})


def _decode_row(g: int = 4) -> gqa_speed.DecodeRow:
    return gqa_speed.DecodeRow(g, 16384 * g, {"course": [2e-3, 3e-3, 2e-3]})


def _decode_bench() -> gqa_speed.DecodeBench:
    return gqa_speed.DecodeBench(4, 16, 64, 2, 1, 1, [_decode_row(4), _decode_row(1)], [2e-3] * 3,
                                 [1e-3] * 3, 2**20, read_s=[1e-3] * 3, read_bytes=2**20)


def _comparison() -> mha_speed.DeviceComparison:
    timings = [timing.Timing(MHA, 0.1, 1.0, [0.1]), timing.Timing("b", 0.2, 2.0, [0.2])]
    return mha_speed.DeviceComparison("t", timings, {"b": 1e-6}, 1e-3, 1.0, {"b": True}, notes=["n"])


RECORDS = {"Timing": _timing, "RatioSpread": _spread, "NotebookMemory": _notebook, "StepRow": _step_row,
           "WholeStep": _whole_step, "DecodeRow": _decode_row, "DecodeBench": _decode_bench,
           "DeviceComparison": _comparison}


# -- g07 / g29: a record checked once stays valid ----------------------------------------------
@pytest.mark.parametrize(("record", "field", "value"), [
    ("Timing", "samples_s", [-5.0]),
    ("Timing", "median_s", float("nan")),
    ("RatioSpread", "median", float("nan")),
    ("RatioSpread", "q1", 2.0),
    ("RatioSpread", "repeats", 0),
    ("NotebookMemory", "peak_mb", -5.0),
    ("NotebookMemory", "error", ""),
    ("StepRow", "samples_s", [-1.0]),
    ("WholeStep", "rows", []),
    ("WholeStep", "read_s", []),
    ("DecodeRow", "samples_s", {}),
    ("DecodeBench", "rows", []),
    ("DecodeBench", "read_s", [0.0]),
    ("DeviceComparison", "agree", {"b": False, "x": True}),
])
def test_records_refuse_a_changed_field(record, field, value) -> None:
    made = RECORDS[record]()
    refused(lambda: setattr(made, field, value), dataclasses.FrozenInstanceError, [field])


@pytest.mark.parametrize(("record", "field", "key"), [
    ("WholeStep", "weights_s", (1, 8)),
    ("DecodeRow", "samples_s", "course"),
    ("DeviceComparison", "agree", "x"),
    ("DeviceComparison", "max_abs_diff", "b"),
    ("DeviceComparison", "skipped", "x"),
])
@pytest.mark.parametrize("change", ["set", "del", "update", "clear", "pop", "setdefault"])
def test_records_refuse_a_changed_dict_field(record, field, key, change) -> None:
    mapping = getattr(RECORDS[record](), field)
    changes = {"set": lambda: mapping.__setitem__(key, ()), "del": lambda: mapping.__delitem__(key),
               "update": lambda: mapping.update({key: ()}), "clear": mapping.clear,
               "pop": lambda: mapping.pop(key), "setdefault": lambda: mapping.setdefault(key, ())}
    refused(changes[change], TypeError, [f"{record}.{field}", "read-only"])


@pytest.mark.parametrize(("record", "field"), [
    ("Timing", "samples_s"), ("NotebookMemory", "cells"), ("StepRow", "samples_s"), ("WholeStep", "rows"),
    ("WholeStep", "read_s"), ("DecodeBench", "rows"), ("DecodeBench", "sdpa_mha_s"),
    ("DecodeBench", "copy_s"), ("DecodeBench", "read_s"), ("DeviceComparison", "timings"),
    ("DeviceComparison", "notes"),
])
def test_records_keep_their_lists_as_tuples(record, field) -> None:
    value = getattr(RECORDS[record](), field)
    assert isinstance(value, tuple), (record, field, type(value))
    refused(lambda: value.append(None), AttributeError, ["tuple", "append"])


def test_frozen_records_still_copy_replace_and_read() -> None:
    import copy
    import pickle

    row = _decode_row()
    again = pickle.loads(pickle.dumps(row))
    assert again == row and copy.deepcopy(row) == row
    refused(lambda: again.samples_s.__setitem__("course", ()), TypeError, ["DecodeRow.samples_s"])
    refused(lambda: dataclasses.replace(row, samples_s={"course": []}), ValueError,
            ["DecodeRow.samples_s", "'course'"])
    comparison = _comparison()
    assert all(comparison.agree.values()) and "n" in comparison.report()  # lesson 04's reads
    bench = _decode_bench()
    assert "course" in bench.mha.samples_s and bench.format()  # lesson 07's reads


@pytest.mark.parametrize("names", [["a.ipynb", "a.ipynb"], ["a.ipynb", "b.ipynb", "a.ipynb"]])
def test_format_memory_table_refuses_repeated_names(names) -> None:
    rows = [memory.NotebookMemory(n, 500.0, 10.0) for n in names]
    refused(lambda: memory.format_memory_table(rows), ValueError, ["rows' names", "'a.ipynb'"])


def test_bench_memory_refuses_notebooks_of_one_file_name_before_running(tmp_path, capsys) -> None:
    from course_utils.bench.cli import main

    paths = []
    for folder in ("notebooks", "student"):
        (tmp_path / folder).mkdir()
        paths.append(tmp_path / folder / "01_a.ipynb")
        paths[-1].write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    with pytest.raises(SystemExit) as info:
        main(["memory", *map(str, paths)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "notebooks" in err and "'01_a.ipynb'" in err
    refused(lambda: memory._check_notebook_names(argparse.Namespace(notebooks=list(map(str, paths)))),
            ValueError, ["notebooks", "01_a.ipynb"])


# -- g32: the error line of a failed notebook run -----------------------------------------------
def _timeout_error() -> Exception:
    from nbclient.exceptions import CellTimeoutError
    from nbformat.v4 import new_code_cell

    return CellTimeoutError.error_from_timeout_and_cell("Cell execution timed out", 2,
                                                        new_code_cell("while True: pass"))


@pytest.mark.parametrize(("make", "wanted"), [
    (_timeout_error, "CellTimeoutError: A cell timed out while it was being executed, after 2 seconds."),
    (lambda: RuntimeError("Traceback\n\x1b[0;31mValueError\x1b[0m: boom\n\n-----\n"),
     "RuntimeError: ValueError: boom"),
    (lambda: RuntimeError(""), "RuntimeError: "),
])
def test_notebook_peak_memory_keeps_the_telling_error_line(tmp_path, monkeypatch, make, wanted) -> None:
    notebook = tmp_path / "a.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')

    def failing_run(coroutine, message):
        coroutine.close()  # never started: no kernel
        raise make()

    monkeypatch.setattr(memory.cli, "run_kernel", failing_run)
    row = memory.notebook_peak_memory(notebook, timeout=2)
    assert row.peak_mb is None and row.error == wanted


@pytest.mark.parametrize(("source", "timeout", "said"), [
    ("raise ValueError('boom-xyz')", "60",
     "failed at cell 1 (raise ValueError('boom-xyz')): ValueError: boom-xyz"),
    ("import time; time.sleep(30)", "1",
     "failed at cell 1 (import time; time.sleep(30)): CellTimeoutError: "),
], ids=["raises", "times out"])
def test_bench_memory_names_a_failed_notebook_its_cell_and_error_and_fails(tmp_path, capsys, source, timeout,
                                                                          said) -> None:
    """`bench memory NB` on a notebook whose cell raised or timed out exited 0; the table's cell
    was cut to "not measured: CellExecutionError: Valu", and a timeout left the killed kernel's
    ZMQError traceback on stderr. Now: one line naming the notebook, the cell and the error (a
    timeout: --timeout too), exit 1, no traceback."""
    import nbformat

    from course_utils.bench.cli import main

    path = tmp_path / "broken.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                                   nbformat.v4.new_code_cell(source)]), path)
    assert main(["memory", "--timeout", timeout, str(path)]) == 1
    out, err = capsys.readouterr()
    line = next(line for line in err.splitlines() if "broken.ipynb failed" in line)
    assert line.startswith("python -m course_utils.bench memory: broken.ipynb ") and said in line, err
    assert ("--timeout 1" in line) == (timeout == "1") and "Traceback" not in err, err
    assert "not measured" in out


# -- battery 19 (fix49s) -----------------------------------------------------------------------------

# -- g06: a peak below the size a test began with was printed as a negative rise --
@pytest.mark.parametrize(("peak", "start"), [(5, 50), (1.0, 5.0), (600.0, 620.0)])
def test_a_peak_below_the_start_is_refused(tmp_path, peak, start) -> None:
    record = {"peak_mb": peak, "start_mb": start, "children_mb": 0, "seconds": 1}
    words = ["'t'", f"peak_mb={peak!r}", f"start_mb={start!r}"]
    refused(lambda: format_test_report({"t": record}), ValueError, words)
    report = tmp_path / "peaks.json"
    report.write_text(json.dumps({"tests": {"t": record}}), encoding="utf-8")
    before = report.read_bytes()
    refused(lambda: read_test_report(report), ValueError, [str(report), *words])
    assert report.read_bytes() == before


def test_a_peak_a_reading_below_the_start_is_kept_and_rises_by_0() -> None:
    """Linux's per-CPU RSS counters: the course's own reports hold peaks 0.1-0.3 MB below the start."""
    record = {"peak_mb": 605.0, "start_mb": 605.1, "children_mb": None, "seconds": 0.2}
    text = format_test_report({"t": record})
    assert "+0 MB" in text and "-0 MB" not in text


# -- g09: format_training_table printed NaN and negative numbers and their medians --
@pytest.mark.parametrize(("key", "value"), [
    ("induction_seconds", math.nan), ("agreement_seconds", -1.0), ("agreement_seconds", math.inf),
    ("induction_steps", -5), ("agreement_accuracy", -0.5),
])
def test_training_rows_with_nan_or_negative_numbers_are_refused(key, value) -> None:
    good = {"seed": 0, "induction_steps": 100, "induction_seconds": 1.0, "agreement_seconds": 2.0,
            "agreement_accuracy": 0.9}
    rows = [good, {**good, "seed": 1, key: value}]
    refused(lambda: format_training_table(rows), ValueError, [f"rows[1][{key!r}]", ">= 0", repr(value)])


def test_training_rows_with_zero_and_none_still_print() -> None:
    rows = [{"seed": 0, "steps": None, "seconds": 0.0, "acc": 0.0},
            {"seed": 1, "steps": 10**30, "seconds": 1.0, "acc": 1.0}]
    assert format_training_table(rows).splitlines()[-1].split()[:2] == ["median", "never"]


# -- battery 20 (fix50p) -----------------------------------------------------------------------------

# -- S1: a record's name is never empty, whichever record (checked once, in check_record) ---------
@pytest.mark.parametrize("make, label", [
    (lambda: TraceStep("", "x", ("B", "T"), (2, 5), 0, True), "TraceStep.name"),
    (lambda: RatioSpread("", "base", 2.0, 1.9, 2.1, 1.8, 2.2, 3), "RatioSpread.name"),
    (lambda: NotebookMemory("", 100.0, 1.0), "NotebookMemory.name"),
], ids=["TraceStep", "RatioSpread", "NotebookMemory"])
def test_records_refuse_an_empty_name(make, label):
    raises_naming(ValueError, [label, "non-empty", "''"], make)


@dataclasses.dataclass(frozen=True)
class _Named:
    name: str
    note: str = ""  # another str field: may stay empty

    def __post_init__(self) -> None:
        check_record(self)


def test_check_record_refuses_an_empty_name_without_being_asked():
    raises_naming(ValueError, ["_Named.name", "non-empty", "''"], lambda: _Named(""))
    assert _Named("a").note == ""  # only the name is held to it
    assert NotebookMemory("nb.ipynb", 100.0, 1.0).error == ""


# -- battery 20 (fix50s) -----------------------------------------------------------------------------

# -- O5: read_test_report let a RecursionError out of json.loads, naming no file --
def test_a_deeply_nested_test_report_is_refused_naming_the_file(tmp_path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    err = raises_naming(ValueError, [str(path), "per-test memory report", "nested too deeply"],
                        lambda: read_test_report(path))
    assert "UTF-8" not in err  # valid UTF-8 and valid JSON: only its depth is the problem


# -- S8: format_training_table printed an accuracy of 1.5 --
@pytest.mark.parametrize(("key", "value"), [("agreement_acc", 1.5), ("induction_heldout_acc", 2),
                                            ("agreement_acc_attractor", 1.0000001)])
def test_an_accuracy_above_one_is_refused_naming_the_row_and_column(key, value) -> None:
    good = {"seed": 0, "induction_seconds": 1.0, "induction_heldout_acc": 0.9, "agreement_acc": 1.0,
            "agreement_acc_attractor": 0.0}
    rows = [good, {**good, "seed": 1, key: value}]
    raises_naming(ValueError, [f"rows[1][{key!r}]", "accuracy", "[0, 1]", repr(value)],
                  lambda: format_training_table(rows))


# -- battery 30 --------------------------------------------------------------------------------------

# -- notebook_memory_huge_timeout: timeout=10**400 came back as the notebook's error row -------------
def test_notebook_peak_memory_refuses_a_huge_timeout_by_name(tmp_path):
    from course_utils.bench.memory import notebook_peak_memory

    with pytest.raises(ValueError, match=r"^timeout must be an int in 1\.\.604800"):
        notebook_peak_memory(tmp_path / "never_run.ipynb", timeout=10 ** 400)


# -- battery 34 --------------------------------------------------------------------------------------

# -- bench_test_memory_null_seconds: read_test_report took "seconds": null, the table then crashed ---
@pytest.mark.parametrize("record", [{"peak_mb": 1.0, "seconds": None}, {"peak_mb": 1.0}])
def test_test_memory_prints_a_null_or_absent_time_as_a_dash(tmp_path, capsys, record) -> None:
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"tests": {"t::a": record}}), encoding="utf-8")
    assert bench_main(["test-memory", str(report)]) in (None, 0)
    out, err = capsys.readouterr()
    row = next(line for line in out.splitlines() if line.endswith("t::a"))
    assert row.split() == ["1", "MB", "-", "-", "t::a"], row  # no time measured: not "0.0 s"
    assert err == ""
