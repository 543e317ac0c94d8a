"""Battery 5's silent and obscure cases in the model, task, bench, interp and attention helpers:
each bad call now raises (or warns) with the argument's name, what was expected and what arrived,
and the control beside it still works."""

from __future__ import annotations

import os

import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.attention import hooks, kv_figure, naive_mha, sdpa_backends, shapes
from course_utils.attention import validation as V
from course_utils.attention.mha import MultiHeadAttention
from course_utils.bench import gqa_speed as GS
from course_utils.bench import mha_speed as MS
from course_utils.bench import timing as TI
from course_utils.bench import train_speed as TS
from course_utils.bench.cli import main as bench_main
from course_utils.interp import ablation as A
from course_utils.interp import circuits as CI
from course_utils.interp import patching as P
from course_utils.interp import scores as S
from course_utils.model import checkpoint as CK
from course_utils.model import train as TRN
from course_utils.model.kv_cache import PreallocatedCache
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks import synthetic as SY
from course_utils.tasks import two_relations as TWO
from course_utils.tasks import worked_example as WE

torch.manual_seed(0)
SM = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=2)).eval()
TOK = torch.tensor([[1, 2, 3, 4, 1, 2]])


def _sample(generator):
    tokens = torch.randint(0, 10, (4, 6), generator=generator)
    return tokens, tokens.roll(-1, 1)


def _mkfifo(tmp_path):
    path = tmp_path / "w.json"
    os.mkfifo(path)
    return path


MODEL_AND_TASK_CASES = [
    Case("check_int/min>max", lambda: V.check_int(3, "x", minimum=5, maximum=1), ValueError,
         ["x", "5..1", "empty", "3"]),
    Case("check_fits_in_memory/neg", lambda: V.check_fits_in_memory(-1, "buf"), ValueError,
         ["buf", "int >= 0", "-1"]),
    Case("History.metric/missing", lambda: TRN.History("t").metric("zz"), KeyError,
         ["'zz'", "recorded", "none"]),
    Case("train_model/stop_at_target no target",
         lambda: TRN.train_model(SM, _sample, TRN.TrainConfig(steps=3), stop_at_target=True, progress=False),
         ValueError, ["stop_at_target=True", "evaluate", "target_metric", "target", "None"]),
    Case("train_model/target nan",
         lambda: TRN.train_model(SM, _sample, TRN.TrainConfig(steps=3), target=float("nan"), progress=False),
         ValueError, ["target must be a finite number", "nan"]),
    Case("train_model/target_metric NaN",
         lambda: TRN.train_model(SM, _sample, TRN.TrainConfig(steps=2),
                                 evaluate=lambda m: {"acc": float("nan")},
                                 target_metric="acc", target=0.5, progress=False),
         ValueError, ["NaN", "target_metric 'acc'", "step 2"]),
    Case("ModelConfig/d_mlp without mlp", lambda: ModelConfig(vocab_size=10, max_len=8, d_mlp=32), ValueError,
         ["d_mlp=32", "mlp=False", "mlp=True"]),
    Case("TT.embed/start neg", lambda: SM.embed(TOK, start=-1), ValueError, ["start", "0..7", "-1"]),
    Case("TT.embed/start past", lambda: SM.embed(TOK, start=5), ValueError,
         ["6 tokens after 5 cached tokens", "max_len=8"]),
    Case("Prealloc/huge", lambda: PreallocatedCache(64, 64, 64, 128, 10**9), ValueError,
         ["max_len", "GiB", "memory"]),
    Case("sha256_of/int", lambda: CK.sha256_of(5), TypeError, ["path", "str or Path", "int"]),
    Case("InductionTask/dup periods", lambda: SY.InductionTask(train_periods=(2, 2, 3)), ValueError,
         ["train_periods", "once", "(2, 2, 3)", "[2]"]),
    Case("tokenize/add_bos str", lambda: SY.tokenize("the cat", add_bos="no"), TypeError,
         ["add_bos", "True or False", "'no'"]),
    Case("compare_heads/dup seeds", lambda: TWO.compare_heads(TWO.TwoKeyTask(), heads=(1,), seeds=[0, 0]),
         ValueError, ["seeds", "distinct", "[0, 0]"]),
    Case("compare_heads/dup heads", lambda: TWO.compare_heads(TWO.TwoKeyTask(), heads=(2, 2), seeds=[0]),
         ValueError, ["heads", "distinct", "[2, 2]"]),
    Case("plot_learning_curves/empty", lambda: TWO.plot_learning_curves([]), ValueError,
         ["results", "RunResult", "empty"]),
    Case("plot_learning_curves/not results", lambda: TWO.plot_learning_curves([1]), TypeError,
         ["results[0]", "RunResult", "int"]),
    Case("compute_steps/not example", lambda: WE.compute_steps(5), TypeError,
         ["example", "WorkedExample", "int"]),
    Case("round_half_up/str", lambda: WE.round_half_up("1.5"), TypeError, ["x", "number", "str"]),
    Case("load_worked/dir", lambda: WE.load_worked_example("/tmp"), IsADirectoryError,
         ["path", "/tmp", "folder"]),
]


@pytest.mark.parametrize("case", MODEL_AND_TASK_CASES, ids=lambda c: c.name)
def test_model_and_task_bad_input_is_named(case):
    assert_named(case)


def test_the_controls_beside_the_refused_calls_still_work():
    assert V.check_int(3, "x", minimum=1, maximum=5) == 3
    V.check_fits_in_memory(0, "buf")
    assert ModelConfig(vocab_size=10, max_len=8, mlp=True, d_mlp=32).mlp_width == 32
    assert SM.embed(TOK[:, :2], start=6).shape == (1, 2, 8)  # positions 6, 7: the last two
    assert SY.tokenize("the cat", add_bos=False).tolist() == SY.tokenize("the cat")[1:].tolist()
    assert WE.round_half_up(0.0105) == 0.011 and WE.round_half_up([1, 2]).tolist() == [1.0, 2.0]
    assert SY.InductionTask(train_periods=(2, 3)).train_periods == (2, 3)


def test_load_worked_example_names_a_fifo_without_reading_it(tmp_path):
    with pytest.raises(WE.WorkedExampleError, match=r"which is a FIFO \(named pipe\)"):
        WE.load_worked_example(_mkfifo(tmp_path))


def test_history_metric_lists_the_recorded_names():
    history = TRN.History("t", eval_steps=[1], eval_metrics=[{"acc": 0.5}])
    assert history.metric("acc") == [0.5]
    with pytest.raises(KeyError, match=r"'ac'.*\['acc'\]"):
        history.metric("ac")


def test_a_nan_metric_is_named_in_a_warning_and_recorded():
    with pytest.warns(RuntimeWarning, match=r"NaN for \['acc'\] at step 1"):
        history = TRN.train_model(SM, _sample, TRN.TrainConfig(steps=2),
                                  evaluate=lambda m: {"acc": float("nan")}, eval_every=1, progress=False)
    assert len(history.eval_metrics) == 2  # warned once, both evaluations kept


def test_grad_clip_zero_means_no_clipping_not_frozen_weights():
    """TrainConfig documents 0 as "off": the weights must move (a max_norm of 0 would zero
    every gradient and leave them where they started)."""
    assert "0`` turns clipping off" in TRN.TrainConfig.__doc__
    torch.manual_seed(1)
    model = TinyTransformer(SM.config)
    before = [p.detach().clone() for p in model.parameters()]
    TRN.train_model(model, _sample, TRN.TrainConfig(steps=2, grad_clip=0), progress=False)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_the_default_warmup_of_a_short_run_reaches_lr():
    config = TRN.TrainConfig(steps=10, lr=0.1)  # the default warm-up (20) is cut to the run
    assert config.lr_at(9) == pytest.approx(0.1) and config.lr_at(0) < config.lr_at(9)


def test_load_checkpoint_names_a_folder_and_what_it_holds(tmp_path):
    CK.save_checkpoint(SM, tmp_path / "runs" / "toy", task="t", metrics={}, command="c")
    with pytest.raises(IsADirectoryError, match=r"folder .*runs.*\['toy'\]"):
        CK.load_checkpoint(tmp_path / "runs")


def test_save_checkpoint_names_the_path_when_its_folder_cannot_be_made(tmp_path):
    with pytest.raises(CK.CheckpointError, match=r"cannot make the folder /proc/nope .*'/proc/nope/m'"):
        CK.save_checkpoint(SM, "/proc/nope/m", task="t", metrics={}, command="c")


@pytest.mark.parametrize("options, words", [
    (["--steps", "0"], "--steps must be an int in 1..100000, got 0"),
    (["--batch-size", "0"], "--batch-size must be a positive int, got 0"),
    (["--device", "tpu"], "--device 'tpu'"),
    (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["--seed", "-1"], "--seed must be >= 0, got -1"),
    (["--out", "/proc/x/m"], "--out '/proc/x/m': cannot write in /proc/x"),
])
def test_train_cli_refuses_bad_options_in_one_line_before_training(options, words, capsys):
    with pytest.raises(SystemExit) as info:
        TRN.main(["induction", *options, "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and words in err and "Traceback" not in err
    assert "steps in" not in capsys.readouterr().out  # nothing was trained


def test_train_cli_refuses_an_out_that_is_a_folder_before_training(tmp_path, capsys):
    (tmp_path / "m.safetensors").mkdir()
    with pytest.raises(SystemExit):
        TRN.main(["induction", "--steps", "2", "--out", str(tmp_path / "m"), "--no-progress"])
    assert "it is a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]


def test_train_cli_reports_divergence_in_one_line_and_writes_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        TRN.main(["induction", "--steps", "3", "--lr", "1e30", "--out", str(tmp_path / "new" / "m"),
                  "--no-progress"])
    assert info.value.code == 1 and "training diverged" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # the probe's folder is gone too



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


def test_format_table_reports_ratios_to_the_baseline_it_names():
    lines = TI.format_table("t", T1, "b", "B").splitlines()
    assert lines[1].endswith("ratio to B")
    assert [line.split()[-1] for line in lines[2:]] == ["0.50x", "1.00x"]  # not the stored ratios


def test_an_integer_clock_that_moves_forward_still_works():
    readings = iter(range(0, 100, 2))
    assert TI.interleaved_samples({"a": lambda: 1}, repeats=2, warmup=0, clock=lambda: next(readings)) == \
        {"a": [2.0, 2.0]}


def test_copy_mib_zero_is_documented_and_leaves_the_copy_out():
    assert "``copy_mib=0`` leaves the copy out" in GS.bench_decode.__doc__
    run = GS.bench_decode(4, 8, 16, 1, [4], copy_mib=0, repeats=1, warmup=0, progress=False)
    assert run.copy_s == () and run.copy_bytes == 0


def test_bench_cli_names_a_negative_shape(capsys):
    with pytest.raises(SystemExit) as info:
        bench_main(["gqa", "--shapes", "-1x1024"])
    assert info.value.code == 2 and "--shapes" in (err := capsys.readouterr().err) and "'-1x1024'" in err


INTERP_CASES = [
    Case("ablated_logits/zero with means",
         lambda: A.ablated_logits(SM, TOK, [(0, 0)], method="zero", means=A.mean_head_outputs(SM, TOK)),
         ValueError, ["means", "method='mean'", "'zero'"]),
    Case("role_verdicts/unknown role", lambda: S.role_verdicts({"zzz": torch.rand(2, 2)}), ValueError,
         ["'zzz'", "'induction'", "chance"]),
    Case("role_verdicts/typo", lambda: S.role_verdicts({"inductin": torch.rand(2, 2)}), ValueError,
         ["did you mean 'induction'"]),
    Case("role_verdicts/chance for a missing role",
         lambda: S.role_verdicts({"induction": torch.rand(2, 2)}, chance={"induction": 0.1, "firs": 0.2}),
         ValueError, ["chance", "['firs']", "['induction']"]),
    Case("final_scale/positions oob", lambda: P.final_scale(SM, TOK, torch.tensor([9])), ValueError,
         ["positions", "0..5", "9"]),
    Case("final_scale/positions neg", lambda: P.final_scale(SM, TOK, torch.tensor([-1])), ValueError,
         ["positions", "0..5", "-1"]),
    Case("resampled_rows/empty ref",
         lambda: P.resampled_rows(torch.tensor([3]), torch.tensor([], dtype=torch.long),
                                  generator=torch.Generator()),
         ValueError, ["reference_lengths", "empty"]),
    Case("resampled_rows/no match",
         lambda: P.resampled_rows(torch.tensor([3]), torch.tensor([2, 4]), generator=torch.Generator()),
         ValueError, ["length 3", "[2, 4]"]),
    Case("frozen_final_norm/shape",
         lambda: CI.frozen_final_norm(SM, torch.randn(1, 6, 8), torch.randn(1, 5, 8)), ValueError,
         ["component (1, 5, 8)", "stream (1, 6, 8)", "broadcast"]),
]


@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: c.name)
def test_interp_bad_input_is_named(case):
    assert_named(case)


def test_the_interp_controls_still_work():
    means = A.mean_head_outputs(SM, TOK)
    zero = A.ablated_logits(SM, TOK, [(0, 0)])
    assert not torch.equal(zero, A.ablated_logits(SM, TOK, [(0, 0)], method="mean", means=means))
    table = A.ablation_table(SM, [A.Evaluation(TOK, lambda logits: {"m": float(logits.mean())})],
                             {"off": [(0, 0)]}, method="zero", means=means)  # a loop may pass both
    assert table.loc["off", "m"] == pytest.approx(float(zero.mean()))
    own = S.role_verdicts({"mine": torch.rand(2, 2)}, chance={"mine": 0.25})
    assert own[0].startswith("mine: best")
    assert P.final_scale(SM, TOK, torch.tensor([5])).shape == (1,)
    assert CI.frozen_final_norm(SM, torch.randn(1, 6, 8), torch.randn(3, 1, 6, 8)).shape == (3, 1, 6, 8)


MHA = MultiHeadAttention(8, 2)
X = torch.randn(2, 5, 8)


def _with_hooks(fwd_hooks):
    with hooks.hooks(SM, fwd_hooks):
        return SM(TOK)


ATTENTION_CASES = [
    Case("cost_table/dup heads", lambda: shapes.cost_table(1, 4, 8, [2, 2]), ValueError,
         ["head_counts", "distinct", "[2, 2]"]),
    Case("design_name/kv 0", lambda: kv_figure.design_name(2, 0), ValueError,
         ["num_kv_heads", "positive", "0"]),
    Case("design_name/kv>heads", lambda: kv_figure.design_name(2, 4), ValueError,
         ["num_kv_heads", "dividing num_heads=2", "4"]),
    Case("design_name/not div", lambda: kv_figure.design_name(8, 3), ValueError,
         ["num_kv_heads", "[1, 2, 4, 8]", "3"]),
    Case("precision_notes/bad dtype", lambda: sdpa_backends.precision_notes("cpu", "float32"), TypeError,
         ["dtype", "floating torch.dtype", "'float32'"]),
    Case("precision_notes/int dtype", lambda: sdpa_backends.precision_notes("cpu", torch.int64), TypeError,
         ["dtype", "floating", "torch.int64"]),
    Case("hook_points/None", lambda: hooks.hook_points(None), TypeError, ["module", "nn.Module", "NoneType"]),
    Case("hooks/not list", lambda: _with_hooks(5), TypeError,
         ["fwd_hooks", "list of (name, fn) pairs", "int"]),
    Case("hooks/not pair", lambda: _with_hooks(["blocks.0.attn.hook_z"]), TypeError,
         ["fwd_hooks[0]", "pair", "str"]),
    Case("hooks/where not str", lambda: _with_hooks([(3, lambda x, hook: x)]), TypeError,
         ["fwd_hooks[0][0]", "name (str)", "int"]),
    Case("run_with_cache/int name", lambda: hooks.run_with_cache(SM, TOK, names=5), TypeError,
         ["names", "list of names", "int"]),
    Case("run_with_cache/int in list", lambda: hooks.run_with_cache(SM, TOK, names=[5]), TypeError,
         ["names[0]", "str", "int"]),
    Case("naive/stack shape mismatch",
         lambda: naive_mha.stack_head_weights([torch.randn(4, 8)] * 2, [torch.randn(3, 8)] * 2,
                                              [torch.randn(4, 8)] * 2),
         ValueError, ["k_parts[0]", "(3, 8)", "same shape as q_parts[0], (4, 8)"]),
]


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: c.name)
def test_attention_bad_input_is_named(case):
    assert_named(case)


@pytest.mark.parametrize("where", ["all", "one"])
def test_a_nan_query_is_documented_and_shows_as_nan_with_the_weights(where):
    """The fused path returns zeros for a NaN query (PyTorch's kernel): the module docstring
    says so and names need_weights=True, which must show the NaN in that query's row only."""
    from course_utils.attention import mha

    assert "need_weights=True" in mha.__doc__ and "returns zeros" in mha.__doc__
    query = X * float("nan") if where == "all" else X.clone().index_put_(
        (torch.tensor([0]), torch.tensor([1]), torch.tensor([2])), torch.tensor(float("nan")))
    slow, _ = MHA(query, X, X, need_weights=True)
    rows = query.isnan().any(-1)  # (B, T)
    assert torch.equal(slow.isnan().all(-1), rows) and not slow[~rows].isnan().any()


def test_the_attention_controls_still_work():
    assert [kv_figure.design_name(8, g) for g in (8, 2, 1)] == ["MHA", "GQA", "MQA"]
    assert list(shapes.cost_table(1, 4, 8, [1, 2]).index) == [1, 2]
    assert sdpa_backends.precision_notes("cpu", torch.float32) == []
    out, cache = hooks.run_with_cache(SM, TOK, names=["blocks.0.attn.hook_z"])
    assert list(cache) == ["blocks.0.attn.hook_z"]
    assert torch.equal(_with_hooks([("blocks.0.attn.hook_z", lambda x, hook: x)])[0], out[0])
