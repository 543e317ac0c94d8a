"""Battery 11's package findings (issue 38): counts and sizes without an upper bound, arguments
checked after use, tensors with no values and arguments of the wrong kind. Each is now refused
by name, before any work: the argument, what was expected and what arrived."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from course_utils.bench import cli, decode_step, gqa_speed, timing

HUGE = 10**12
ROOT = Path(__file__).resolve().parent.parent


def refused(call, error, words):
    """``call()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


def never_called():
    raise AssertionError("a function was timed although its counts were refused")


# -- item 1 and 7: timing counts have one upper bound, checked before the progress bar -------------
COUNTS = [
    ("interleaved repeats", lambda: timing.interleaved_samples({"a": never_called}, repeats=HUGE, warmup=0),
     ValueError, ["repeats", "10000", str(HUGE)]),
    ("interleaved warmup", lambda: timing.interleaved_samples({"a": never_called}, repeats=1, warmup=HUGE),
     ValueError, ["warmup", "10000"]),
    ("interleaved inner", lambda: timing.interleaved_samples({"a": never_called}, repeats=1, warmup=0,
                                                             inner=HUGE), ValueError, ["inner", "10000"]),
    ("time_interleaved repeats", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                 repeats=HUGE), ValueError, ["repeats"]),
    ("time_interleaved warmup", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                warmup=HUGE), ValueError, ["warmup"]),
    ("time_interleaved inner", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                               inner=HUGE), ValueError, ["inner"]),
    ("time_interleaved repeats str", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                     repeats="3"), TypeError,
     ["repeats must be an int", "str"]),
    ("time_interleaved repeats None", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                      repeats=None), TypeError,
     ["repeats must be an int", "None"]),
    ("time_interleaved warmup str", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                    warmup="3"), TypeError,
     ["warmup must be an int"]),
    ("time_interleaved warmup None", lambda: timing.time_interleaved({"a": never_called}, baseline="a",
                                                                     warmup=None), TypeError,
     ["warmup must be an int"]),
    ("read_bandwidth repeats", lambda: decode_step.read_bandwidth(repeats=HUGE), ValueError, ["repeats"]),
    ("time_flushed repeats", lambda: decode_step.time_flushed({"a": never_called}, torch.ones(4), 0, HUGE),
     ValueError, ["repeats"]),
    ("time_cold repeats str", lambda: gqa_speed.time_cold({"a": never_called}, baseline="a", repeats="9"),
     TypeError, ["repeats must be an int"]),
    ("bench_decode warmup", lambda: gqa_speed.bench_decode(2, 8, 16, 1, [2, 1], repeats=1, warmup=HUGE,
                                                           progress=False), ValueError, ["warmup"]),
    ("stage_times repeats", lambda: gqa_speed.stage_times((2, 1), num_heads=2, d_head=8, context=16,
                                                          num_layers=1, repeats=HUGE), ValueError,
     ["repeats"]),
    ("bench_whole_step repeats", lambda: decode_step.bench_whole_step([(1, 16)], (2, 1), d_model=16,
                                                                      num_heads=2, num_layers=1,
                                                                      repeats=HUGE, progress=False),
     ValueError, ["repeats"]),
]


@pytest.mark.parametrize("label, call, error, words", COUNTS, ids=[c[0] for c in COUNTS])
def test_timing_counts_are_bounded_and_checked_first(label, call, error, words):
    refused(call, error, words)


def test_the_cli_and_the_functions_share_one_cap():
    assert cli.repeat_count(str(timing.MAX_REPEATS)) == timing.MAX_REPEATS
    with pytest.raises(argparse.ArgumentTypeError, match=f"{timing.MAX_REPEATS:,}"):
        cli.repeat_count(str(timing.MAX_REPEATS + 1))
    assert timing.check_round_counts(timing.MAX_REPEATS, timing.MAX_REPEATS, timing.MAX_REPEATS) == (
        timing.MAX_REPEATS, timing.MAX_REPEATS, timing.MAX_REPEATS)


# -- item 2: sizes are refused before anything is allocated, naming the argument -----------------
def _sizes_cases():
    from course_utils.attention.shapes import cost_table
    from course_utils.bench.mha_speed import compare_on_device
    from course_utils.model.kv_cache import CatCache
    from course_utils.tasks.synthetic import InductionTask
    from course_utils.tasks.two_relations import attention_by_copies
    from course_utils.tasks.worked_example import round_half_up

    def compare(**kwargs):
        return lambda: compare_on_device("cpu", **{"batch": 1, "seq_len": 4, "d_model": 8, "num_heads": 2,
                                                   "dtype": torch.float32, "repeats": 1, **kwargs})

    cases = [
        ("cost_table batch", lambda: cost_table(HUGE, 16, 64, [1, 2, 4]), ValueError, ["batch", "GiB"]),
        ("cost_table seq_len", lambda: cost_table(2, HUGE, 64, [1, 2, 4]), ValueError, ["seq_len", "GiB"]),
        ("cost_table d_model", lambda: cost_table(2, 16, 2**40, [1, 2, 4]), ValueError, ["d_model", "GiB"]),
        ("cost_table scores beyond memory", lambda: cost_table(2, 10**6, 64, [1, 2]), ValueError,
         ["seq_len", "GiB", "more than this machine"]),
        ("compare device 3", lambda: compare_on_device(3), TypeError,
         ["device", "int"]),
        ("compare device bogus", lambda: compare_on_device("bogus"), ValueError, ["device", "bogus"]),
        ("compare device empty", lambda: compare_on_device(""), ValueError, ["device"]),
        ("compare device None", lambda: compare_on_device(None), TypeError, ["device", "NoneType"]),
        ("compare device meta", lambda: compare_on_device("meta"), ValueError, ["device", "meta"]),
        ("CatCache num_layers", lambda: CatCache(HUGE), ValueError, ["num_layers", "GiB"]),
        ("InductionTask vocab_size", lambda: InductionTask(vocab_size=HUGE), ValueError,
         ["vocab_size", "GiB"]),
        ("InductionTask seq_len", lambda: InductionTask(seq_len=HUGE), ValueError, ["seq_len", "GiB"]),
        ("round_half_up decimals", lambda: round_half_up(0.5, decimals=HUGE), ValueError,
         ["decimals", "15", str(HUGE)]),
        ("round_half_up decimals negative", lambda: round_half_up(0.5, decimals=-HUGE), ValueError,
         ["decimals"]),
        ("attention_by_copies digits", lambda: attention_by_copies(None, None, digits=HUGE), ValueError,
         ["digits", "15"]),
    ]
    for name in ("batch", "seq_len", "d_model"):
        cases += [(f"compare {name} {value!r}", compare(**{name: value}), error, [name])
                  for value, error in ((-1, ValueError), (0, ValueError), (2.5, TypeError), ("3", TypeError),
                                       (None, TypeError), (True, TypeError))]
        cases.append((f"compare {name} huge", compare(**{name: HUGE}), ValueError, ["GiB"]))
    return cases


SIZES = _sizes_cases()


@pytest.mark.parametrize("label, call, error, words", SIZES, ids=[c[0] for c in SIZES])
def test_sizes_are_refused_before_allocating(label, call, error, words):
    refused(call, error, words)


def test_a_task_that_fits_still_blames_batch_size():
    from course_utils.tasks.synthetic import InductionTask

    task = InductionTask(vocab_size=10**6)
    refused(lambda: task.sample(HUGE, torch.Generator().manual_seed(0)), ValueError, ["batch_size", "GiB"])


# -- item 6: repeated head-group counts are refused by every decode benchmark, by one helper ------
DUPLICATES = [
    ("stage_times", lambda: gqa_speed.stage_times((2, 2), num_heads=2, d_head=8, context=16, num_layers=1)),
    ("stage_bandwidth", lambda: gqa_speed.stage_bandwidth((2, 1, 1), num_heads=2, d_head=8, context=16,
                                                          num_layers=1)),
    ("bench_decode", lambda: gqa_speed.bench_decode(2, 8, 16, 1, [2, 2], repeats=1, progress=False)),
    ("make_kv_caches", lambda: gqa_speed.make_kv_caches(2, 8, 16, 1, (2, 1, 1))),
    ("bench_whole_step", lambda: decode_step.bench_whole_step([(1, 16)], (2, 2), d_model=16, num_heads=2,
                                                              num_layers=1, repeats=1, progress=False)),
]


@pytest.mark.parametrize("label, call", DUPLICATES, ids=[c[0] for c in DUPLICATES])
def test_repeated_groups_are_refused(label, call):
    refused(call, ValueError, ["groups must list distinct head-group counts", "which repeats"])


# -- item 8: notebook_tools.py interrupted says so on one line, exits non-zero, writes nothing ----
def _notebook(path: Path, source: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, str(path))
    return path.read_bytes()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_notebook_tools_interrupted_between_files_says_so(tmp_path, monkeypatch, capsys, signum):
    """The signal arrives as the tool works on a file (here: upgrade, in this process)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import notebook_tools

    path = tmp_path / "a.ipynb"
    before = _notebook(path, "1 + 1")
    monkeypatch.setattr(notebook_tools, "upgrade", lambda p: os.kill(os.getpid(), signum))
    previous = signal.getsignal(signum)
    assert notebook_tools.main(["upgrade", str(path)]) == 128 + signum
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"interrupted by {signal.Signals(signum).name}" in err, err
    assert "Traceback" not in err and path.read_bytes() == before
    assert signal.getsignal(signum) is previous, "main leaves the signal handlers as it found them"


@pytest.mark.slow
def test_notebook_tools_execute_interrupted_by_sigterm_writes_nothing(tmp_path):
    """Battery 11 item 8: SIGTERM during a run gave exit 1 and nbclient's traceback."""
    started = tmp_path / "started"
    path = tmp_path / "slow.ipynb"
    before = _notebook(path, f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)")
    tool = str(ROOT / "scripts" / "notebook_tools.py")
    run = subprocess.Popen([sys.executable, tool, "execute", str(path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)
    assert started.exists(), "the cell never started"
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, (out, err)
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("notebook_tools.py: interrupted by SIGTERM"), err
    assert str(path) in err and "was not changed" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.ipynb", "started"], "no temporary file left"


# -- items 9, 10, 14, 16 and check_seed: arguments of the wrong kind are named when given ---------
def _kinds_cases():
    import numpy as np

    from course_utils.attention import validation as va
    from course_utils.attention.hooks import HookPoint
    from course_utils.attention.shapes import measured_macs
    from course_utils.tasks import two_relations as tr

    task = tr.TwoKeyTask()
    model, batch = tr.LookupModel(task, 16, 1), task.sample(8, seed=0)
    return [
        ("add_hook module", lambda: HookPoint().add_hook(torch.nn.Linear(4, 4)), TypeError,
         ["a hook must be", "Linear.forward", "cannot take 2"]),
        ("measured_macs Linear", lambda: measured_macs(torch.nn.Linear(8, 8), torch.zeros(1, 2, 8)),
         TypeError, ["module must be", "MultiHeadAttention", "Linear"]),
        ("measured_macs torch MHA", lambda: measured_macs(torch.nn.MultiheadAttention(8, 2),
                                                          torch.zeros(1, 2, 8)),
         TypeError, ["module must be", "MultiheadAttention"]),
        ("accuracy_by_share edges None", lambda: tr.accuracy_by_share(model, batch, edges=None), TypeError,
         ["edges must be a list or tuple of numbers", "NoneType"]),
        ("accuracy_by_share edges str", lambda: tr.accuracy_by_share(model, batch, edges="ab"), TypeError,
         ["edges must be a list or tuple of numbers", "'ab'"]),
        ("accuracy_by_share edges item", lambda: tr.accuracy_by_share(model, batch, edges=(0.0, "a", 1.0)),
         TypeError, ["edges[1] must be a real number"]),
        ("check_int minimum str", lambda: va.check_int(3, "n", minimum="1"), TypeError,
         ["check_int's minimum", "n", "'1'"]),
        ("check_int maximum str", lambda: va.check_int(3, "n", maximum="10"), TypeError,
         ["check_int's maximum", "'10'"]),
        ("check_int minimum float", lambda: va.check_int(3, "n", minimum=0.5), TypeError,
         ["check_int's minimum", "0.5"]),
        ("check_int_list minimum str", lambda: va.check_int_list([1, 2], "xs", minimum="0"), TypeError,
         ["check_int's minimum", "xs"]),
        ("check_int_list empty, maximum str",
         lambda: va.check_int_list([], "xs", maximum="0", allow_empty=True), TypeError,
         ["check_int's maximum", "xs"]),
        ("check_seed np.float64", lambda: __import__("course_utils.env").env.check_seed(np.float64(1)),
         TypeError, ["seed must be an int"]),
    ]


KINDS = _kinds_cases()


@pytest.mark.parametrize("label, call, error, words", KINDS, ids=[c[0] for c in KINDS])
def test_wrong_kinds_are_named_when_given(label, call, error, words):
    refused(call, error, words)


def test_a_module_taking_tensor_and_hook_is_still_a_hook():
    from course_utils.attention.hooks import HookPoint

    class Double(torch.nn.Module):
        def forward(self, x, hook):
            return 2 * x

    point = HookPoint()
    point.add_hook(Double())
    x = torch.ones(1, 2, 3, 4)
    assert torch.equal(point(x), 2 * x)


def test_check_seed_takes_numpy_ints_as_check_int_does():
    import numpy as np

    from course_utils.attention.validation import check_int
    from course_utils.env import check_seed

    for seed in (np.int64(7), np.uint8(7), np.int32(7)):
        assert check_seed(seed) == check_int(seed, "seed") == 7
        assert type(check_seed(seed)) is int
    with pytest.raises(ValueError, match="seed must be >= 0"):
        check_seed(np.int64(-1))


# -- items 11-13: a tensor on the meta device is named before its values are read ------------------
def _meta_cases():
    from course_utils.attention.masks import causal_mask, masked_softmax
    from course_utils.interp.heatmaps import model_attention, plot_head
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    from course_utils.tasks import two_relations as tr

    scores, allowed = torch.zeros(1, 3, 3), causal_mask(3)
    a = torch.tensor([1, 2])
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=8, max_len=8, d_model=8, num_heads=2, num_layers=1)
    model = TinyTransformer(config)
    with torch.device("meta"):
        meta_model = TinyTransformer(config)
    tokens = torch.tensor([[1, 2, 3]])
    return [
        ("masked_softmax scores meta", lambda: masked_softmax(scores.to("meta"), allowed), ValueError,
         ["scores and allowed must be on one device", "meta (a shape without values)", "cpu"]),
        ("masked_softmax allowed meta", lambda: masked_softmax(scores, allowed.to("meta")), ValueError,
         ["allowed on device meta (a shape without values)"]),
        ("model_attention tokens meta", lambda: model_attention(model, tokens.to("meta")), ValueError,
         ["tokens is on the meta device"]),
        ("model_attention model meta", lambda: model_attention(meta_model, tokens), ValueError,
         ["model's", "meta device"]),
        ("plot_head weights meta", lambda: plot_head(torch.eye(2).to("meta"), ["a", "b"]), ValueError,
         ["weights is on the meta device"]),
        ("pair_class a meta", lambda: tr.pair_class(a.to("meta"), a, 8), ValueError,
         ["symbol_a is on the meta device"]),
        ("pair_class b meta", lambda: tr.pair_class(a, a.to("meta"), 8), ValueError,
         ["symbol_b is on the meta device"]),
        ("split_pair_class meta", lambda: tr.split_pair_class(a.to("meta"), 8), ValueError,
         ["classes is on the meta device"]),
    ]


META = _meta_cases()


@pytest.mark.parametrize("label, call, error, words", META, ids=[c[0] for c in META])
def test_meta_tensors_are_named_before_use(label, call, error, words):
    refused(call, error, words)


def test_masked_softmax_still_computes_shapes_on_meta():
    from course_utils.attention.masks import causal_mask, masked_softmax

    weights = masked_softmax(torch.zeros(2, 3, 3, device="meta"), causal_mask(3).to("meta"))
    assert weights.shape == (2, 3, 3) and weights.is_meta
    on_cpu = masked_softmax(torch.zeros(2, 3, 3), torch.tensor(True))  # a 0-D mask broadcasts from the CPU
    assert torch.allclose(on_cpu.sum(-1), torch.ones(2, 3))


# -- the NaN policy of the attention modules is written down, and holds ---------------------------
def _nan_cases():
    from course_utils.attention import mla, naive_mha
    from course_utils.attention.mha import MultiHeadAttention

    torch.manual_seed(0)
    x = torch.randn(1, 4, 8)
    x[0, 1, 0] = float("nan")
    return [
        ("MultiHeadAttention", MultiHeadAttention.__doc__,
         lambda: MultiHeadAttention(8, 2)(x, x, x, need_weights=True)[0]),
        ("naive_mha", naive_mha.__doc__, lambda: naive_mha.NaiveMultiHeadAttention(8, 2)(x)),
        ("mla", mla.__doc__, lambda: mla.MultiHeadLatentAttention(8, 2, 4, 4, 2)(x)),
        ("rope", mla.__doc__, lambda: mla.rope(x, torch.arange(4))),
    ]


@pytest.mark.parametrize("label, doc, run", _nan_cases(), ids=[c[0] for c in _nan_cases()])
def test_nan_in_is_documented_as_propagating_and_does(label, doc, run):
    assert "Non-finite inputs" in doc and "propagates to NaN" in doc, f"{label}: no NaN policy written"
    assert bool(run().isnan().any()), f"{label}: a NaN in the input gave no NaN out, as its docstring says"


# -- every table of the two-key task rounds to 0..MAX_DECIMALS digits, checked first ---------------
@pytest.mark.parametrize("digits, error", [(HUGE, ValueError), (-1, ValueError), ("3", TypeError)])
def test_two_relations_tables_check_digits(digits, error):
    from course_utils.tasks import two_relations as tr

    task = tr.TwoKeyTask()
    model, batch = tr.LookupModel(task, 16, 1), task.sample(8, seed=0)
    refused(lambda: tr.accuracy_by_share(model, batch, digits=digits), error, ["digits"])
    refused(lambda: tr.accuracy_table([], digits=digits), error, ["digits"])  # before the results
