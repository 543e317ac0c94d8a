"""Bad input to the model and its training: course_utils.model.transformer (ModelConfig,
TinyTransformer, Block, convert_model) and course_utils.model.train (train_model, TrainConfig, the
task trainers, the train CLI). NaN weights and metrics, meta models, frozen parameters, bad
progress and targets, out paths that are folders, weights larger than memory.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bad_input_cases import (
    Case,
    assert_named,
    meta_copy,
    one_layer_config,
    raises_naming,
    seeded_one_layer_model,
    small_model,
    tiny_model,
    train_mode_tiny_model,
)

from course_utils.attention import validation as V
from course_utils.model import checkpoint as CK
from course_utils.model import train as TRN
from course_utils.model import transformer as TF
from course_utils.model.kv_cache import PreallocatedCache
from course_utils.model.train import (
    History,
    TrainConfig,
    train_agreement,
    train_induction,
    train_mixture,
    train_model,
)
from course_utils.model.transformer import ModelConfig, TinyTransformer, _weight_bytes
from course_utils.tasks import synthetic as SY
from course_utils.tasks import two_relations as TWO
from course_utils.tasks import worked_example as WE

# -- battery 5 ---------------------------------------------------------------------------------------

SM = small_model()


TOK = torch.tensor([[1, 2, 3, 4, 1, 2]])


def _sample(generator):
    tokens = torch.randint(0, 10, (4, 6), generator=generator)
    return tokens, tokens.roll(-1, 1)


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


# -- battery 6 (model) -------------------------------------------------------------------------------

@pytest.mark.parametrize("trainer", [train_induction, train_agreement, train_mixture])
@pytest.mark.parametrize("target, error", [(2.0, ValueError), (-0.1, ValueError), (True, TypeError),
                                           ("0.9", TypeError), (float("nan"), TypeError)])
def test_task_trainers_refuse_a_target_that_is_no_accuracy(trainer, target, error):
    with pytest.raises(error, match="target must be an accuracy"):
        trainer(steps=1, target=target, progress=False)


def test_tiny_transformer_refuses_weights_larger_than_memory_before_allocating():
    config = ModelConfig(vocab_size=10**12, max_len=8, d_model=64, num_heads=4, num_layers=1)
    with pytest.raises(ValueError, match=r"TinyTransformer\(config\) asks for .* GiB.*"
                       r"vocab_size=1000000000000"):
        TinyTransformer(config)
    small = TinyTransformer(ModelConfig(vocab_size=13, max_len=8, d_model=8, num_heads=2, num_layers=1))
    weights = sum(p.numel() for p in small.parameters())
    assert 4 * weights >= _weight_bytes(small.config) > 0


# -- battery 7 (b) -----------------------------------------------------------------------------------

# -- training: warm-up (row 12), the task and the model (rows 13, 14) ----------------------------
def test_a_warmup_longer_than_the_run_is_refused_and_the_default_fits_the_run():
    from course_utils.model.train import TrainConfig

    with pytest.raises(ValueError, match=r"warmup_steps must be at most steps=5 .*got 10"):
        TrainConfig(steps=5, warmup_steps=10)
    assert TrainConfig(steps=5).warmup_steps == 5 and TrainConfig().warmup_steps == 20
    assert TrainConfig(steps=5, warmup_steps=5).lr_at(4) == pytest.approx(TrainConfig().lr)


# -- battery 8 ---------------------------------------------------------------------------------------

def test_train_out_at_a_folder_is_refused_before_training(tmp_path, capsys):
    """Battery 8: `train --out data/checkpoints` (a folder) exited 0 and wrote
    data/checkpoints.json and .safetensors beside the folder, not in it."""
    from course_utils.model import train

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    with pytest.raises(SystemExit) as info:
        train.main(["induction", "--steps", "1", "--no-progress", "--out", str(folder)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and f"{folder / 'induction'}" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"] and not any(folder.iterdir())


# -- battery 9 ---------------------------------------------------------------------------------------

def test_train_batch_size_beyond_memory_is_refused_when_parsed(tmp_path, capsys):
    from course_utils.model import train

    out = tmp_path / "induction"
    with pytest.raises(SystemExit) as info:
        train.main(["induction", "--steps", "1", "--no-progress", "--batch-size", "1000000000",
                    "--out", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--batch-size asks for" in err and "1,000,000,000 sequences" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


# -- battery 9b --------------------------------------------------------------------------------------

def test_train_steps_beyond_the_ceiling_are_refused_before_training(capsys):
    from course_utils.model import train

    with pytest.raises(SystemExit) as stop:
        train.main(["induction", "--steps", str(10**30), "--no-progress"])
    assert stop.value.code == 2
    assert f"--steps must be an int in 1..{train.MAX_STEPS}, got {10**30}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"steps must be an int in 1\.\.100000, got 100001"):
        train.TrainConfig(steps=100_001)


# -- battery 12 --------------------------------------------------------------------------------------

# -- 5. MLP sizes, refused before allocating -----------------------------------------------------
@pytest.mark.parametrize("d_model, d_mlp, error, words", [
    (-3, 8, ValueError, ["d_model", "positive int", "-3"]),
    (True, 8, TypeError, ["d_model", "int", "bool True"]),
    (8, 2.5, TypeError, ["d_mlp", "int", "float 2.5"]),
    (8, "3", TypeError, ["d_mlp", "int", "str '3'"]),
    (8, None, TypeError, ["d_mlp", "int", "NoneType"]),
    (8, 10**13, ValueError, ["d_mlp", "GiB", "more than this machine"]),
], ids=lambda v: repr(v)[:12])
def test_mlp_sizes_checked(d_model, d_mlp, error, words):
    assert_named(Case("MLP", lambda: TF.MLP(d_model, d_mlp), error, words))
    assert TF.MLP(np.int64(4), 8).fc_in.out_features == 8


# -- battery 13 --------------------------------------------------------------------------------------

# -- b13 obscure: MLP.forward and Block.forward had no input check (raw torch errors) ------------
def _stream_layers():
    from course_utils.model.transformer import MLP, Block, ModelConfig

    return {"MLP": MLP(8, 16), "Block": Block(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2,
                                                          mlp=True))}


@pytest.mark.parametrize("layer", ["MLP", "Block"])
@pytest.mark.parametrize("x, error, words", [
    ([1.0], TypeError, ["x must be a torch.Tensor", "list"]),
    (np.zeros((1, 2, 8)), TypeError, ["x must be a torch.Tensor", "ndarray"]),
    (torch.zeros(1, 2, 8, dtype=torch.long), TypeError, ["x must hold floating-point", "torch.int64"]),
    (torch.zeros(1, 2, 8, dtype=torch.float16), TypeError, ["x has dtype torch.float16", "torch.float32"]),
    (torch.zeros(1, 2, 8, device="meta"), ValueError, ["x is on device meta", "cpu"]),
    (torch.zeros(2, 8), ValueError, ["x must be 3-D", "d_model=8", "(2, 8)"]),
    (torch.zeros(1, 2, 5), ValueError, ["x last dim must be d_model=8", "(1, 2, 5)"]),
], ids=["list", "numpy", "int64", "float16", "meta", "2-D", "width"])
def test_stream_layers_check_their_input(layer, x, error, words):
    module = _stream_layers()[layer]
    assert_named(Case(layer, lambda: module(x), error, words))
    out = module(torch.zeros(1, 2, 8))  # the control
    assert (out if layer == "MLP" else out[0]).shape == (1, 2, 8)


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

def test_history_to_dict_names_a_nan_loss_appended_after_construction() -> None:
    from course_utils.model.train import History

    history = History("induction")
    history.steps.append(1)
    history.loss.append(float("nan"))
    with pytest.raises(ValueError, match=r"History\.loss\[0\]"):
        history.to_dict()


def test_history_task_is_a_free_label_as_documented() -> None:
    """Documented, not refused: train_model's task is any label ("custom" by default)."""
    from course_utils.model.train import History

    assert History("zz").to_dict()["task"] == "zz"
    assert "any str" in History.__doc__


# -- battery 14 (fix44b) -----------------------------------------------------------------------------

def test_train_option_given_twice_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        TRN.main(["induction", "--seed", "1", "--seed", "2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --seed: given more than once (1, then 2)" in err, err


def test_train_refuses_replace_task_without_out(capsys):
    with pytest.raises(SystemExit) as info:
        TRN.main(["induction", "--steps", "1", "--replace-task", "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--replace-task" in err and "without --out" in err, err


# -- battery 15 (fix45a) -----------------------------------------------------------------------------

_raises = raises_naming


# -- 1, 9. train: History and train_model's target ----------------------------------------------------
@pytest.mark.parametrize(("fields", "words"), [
    ({"steps": [1, 2], "loss": [1.0]}, ["History.loss", "History.steps has 2", "History.loss has 1"]),
    ({"eval_steps": [25], "eval_metrics": []}, ["History.eval_metrics", "History.eval_steps has 1"]),
    ({"target_metric": "acc", "target": 0.9, "steps_to_target": 25},
     ["History.steps_to_target", "History.seconds_to_target", "None"]),
    ({"steps_to_target": 25, "seconds_to_target": 1.0}, ["History.steps_to_target", "History.target_metric"]),
])
def test_history_refuses_fields_that_do_not_pair_up(fields: dict, words: list[str]) -> None:
    from course_utils.model.train import History

    _raises(ValueError, words, lambda: History("t", **fields))


def test_history_to_dict_rechecks_lists_appended_out_of_step() -> None:
    from course_utils.model.train import History

    history = History("t")
    history.steps.append(1)
    _raises(ValueError, ["History.loss", "History.steps has 1"], history.to_dict)


def _tiny_model():
    from course_utils.model.train import induction_model_config
    from course_utils.model.transformer import TinyTransformer

    return TinyTransformer(induction_model_config(d_model=8, num_heads=2, num_layers=1))


def _never_called(generator):  # the arguments are refused before the first batch
    raise AssertionError("sample_batch was called")


@pytest.mark.parametrize(("arguments", "error", "words"), [
    ({"evaluate": lambda m: {"acc": 1.0}, "target": 0.9}, ValueError,
     ["target=0.9", "target_metric", "None"]),
    ({"target_metric": "acc"}, ValueError, ["target_metric='acc'", "evaluate", "None"]),
    ({"evaluate": lambda m: {"acc": 1.0}, "target_metric": 5, "target": 0.9}, TypeError,
     ["target_metric", "int 5"]),
])
def test_train_model_refuses_a_target_it_could_not_measure(arguments: dict, error: type,
                                                           words: list[str]) -> None:
    from course_utils.model.train import TrainConfig, train_model

    _raises(error, words, lambda: train_model(_tiny_model(), _never_called, TrainConfig(steps=1),
                                              progress=False, **arguments))


# -- battery 16 (fix46r) -----------------------------------------------------------------------------

CFG = one_layer_config()


def test_train_model_checks_sample_batch_arity():
    from course_utils.model.train import TrainConfig, train_model

    with pytest.raises(TypeError, match=r"sample_batch must be .*1 positional argument.*<lambda>\(\)"):
        train_model(seeded_one_layer_model(0), lambda: None, TrainConfig(steps=1), seed=0)


def test_tiny_transformer_and_train_model_refuse_a_meta_model():
    from course_utils.model.train import TrainConfig, train_model

    meta = meta_copy(seeded_one_layer_model(0))
    with pytest.raises(ValueError, match=r"model is on the meta device"):
        meta(torch.zeros(1, 3, dtype=torch.long, device="meta"))

    def batch(generator):
        return torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long)

    with pytest.raises(ValueError, match=r"model is on the meta device"):
        train_model(meta, batch, TrainConfig(steps=1), seed=0)


# -- battery 17 (fix47r) -----------------------------------------------------------------------------

# -- S8: History's steps go forward -----------------------------------------------------------------
@pytest.mark.parametrize("fields, name, shown", [
    ({"steps": [2, 1], "loss": [1.0, 0.5]}, "History.steps", "= 2 then"),
    ({"steps": [1, 1], "loss": [1.0, 0.5]}, "History.steps", "= 1 then"),
    ({"eval_steps": [4, 2], "eval_metrics": [{"acc": 0.1}, {"acc": 0.2}]}, "History.eval_steps", "= 4 then"),
])
def test_history_refuses_steps_out_of_order(fields, name, shown):
    from course_utils.model.train import History

    with pytest.raises(ValueError) as err:
        History(task="t", **fields)
    assert name in str(err.value) and "strictly increase" in str(err.value) and shown in str(err.value)


def test_history_to_dict_checks_steps_appended_out_of_order():
    from course_utils.model.train import History

    history = History(task="t", steps=[1, 2], loss=[1.0, 0.5])
    history.steps.append(2)
    history.loss.append(0.4)
    with pytest.raises(ValueError, match=r"History\.steps must strictly increase"):
        history.to_dict()


# -- battery 18 (fix48rm) ----------------------------------------------------------------------------

def _model() -> TinyTransformer:
    return tiny_model().train()  # tiny_model's sizes and seed 0, in training mode as built


# -- g26: the task model configs fit their task -------------------------------------------------------
def _task_configs():
    from course_utils.model import train as TRN

    return {"induction_model_config": (TRN.induction_model_config, TRN.INDUCTION_TASK.vocab_size,
                                       TRN.INDUCTION_TASK.seq_len),
            "agreement_model_config": (TRN.agreement_model_config, TRN.AGREEMENT_TASK.vocab_size,
                                       TRN.AGREEMENT_TASK.max_len),
            "mixture_model_config": (TRN.mixture_model_config, TRN.MIXTURE_TASK.vocab_size,
                                     TRN.MIXTURE_TASK.seq_len)}


@pytest.mark.parametrize("function", ["induction_model_config", "agreement_model_config",
                                      "mixture_model_config"])
@pytest.mark.parametrize("field", ["vocab_size", "max_len"])
def test_task_model_config_refuses_an_override_the_task_cannot_fit(function, field):
    make, vocab_size, seq_len = _task_configs()[function]
    needed = {"vocab_size": vocab_size, "max_len": seq_len}[field]
    raises_naming(ValueError, [function, f"{field}=4", f"{field} >= {needed}", "does not fit the task"],
            lambda: make(**{field: 4}))


@pytest.mark.parametrize("function", ["induction_model_config", "agreement_model_config",
                                      "mixture_model_config"])
def test_task_model_config_takes_the_task_sizes_and_room_to_spare(function):
    make, vocab_size, seq_len = _task_configs()[function]
    assert make().vocab_size == vocab_size and make().max_len == seq_len
    roomy = make(vocab_size=vocab_size + 1, max_len=seq_len + 1)
    assert (roomy.vocab_size, roomy.max_len) == (vocab_size + 1, seq_len + 1)


# -- g01: train_model names sample_batch's tokens, not the model's 'tokens' ---------------------------
@pytest.mark.parametrize("tokens, words", [
    (torch.arange(32).view(4, 8) % 16 + 50, ["ids in [0, vocab_size=16)", "min 50", "max 65"]),
    (torch.full((4, 8), -1), ["ids in [0, vocab_size=16)", "min -1"]),
    (torch.zeros(4, 20, dtype=torch.long), ["20 tokens", "max_len=12"]),
    (torch.zeros(4, 0, dtype=torch.long), ["at least one token", "(4, 0)"]),
])
def test_train_model_names_sample_batch_for_tokens_the_model_cannot_read(tokens, words):
    from course_utils.model.train import TrainConfig, train_model

    targets = torch.zeros_like(tokens)
    raises_naming(ValueError, ["sample_batch(generator)'s tokens at step 1", *words],
            lambda: train_model(_model(), lambda g: (tokens, targets), TrainConfig(steps=2), progress=False))


def test_train_model_takes_the_integer_batches_its_check_accepts():
    """int32 tokens and targets passed _check_batch but then failed in the model ('tokens must have
    dtype torch.long') or inside cross_entropy (a bare RuntimeError): now read as long."""
    from course_utils.model.train import TrainConfig, train_model

    tokens = torch.randint(0, 16, (4, 8), generator=torch.Generator().manual_seed(0)).int()
    history = train_model(_model(), lambda g: (tokens, tokens), TrainConfig(steps=2), progress=False)
    assert history.steps == [1, 2]


# -- g07: a History changed after it was built is checked again by its methods ------------------------
def _history():
    from course_utils.model.train import History

    return History("t", steps=[1, 2], loss=[1.0, 0.5], eval_steps=[2], eval_metrics=[{"acc": 0.5}])


def _set_metrics_none(history) -> None:
    history.eval_metrics[0] = None


def _append_nan_loss(history) -> None:
    history.steps.append(3)
    history.loss.append(float("nan"))


def _steps_backwards(history) -> None:
    history.steps[1] = 0


def _metric_not_a_number(history) -> None:
    history.eval_metrics[0]["acc"] = "high"


def _eval_step_without_metrics(history) -> None:
    history.eval_steps.append(3)


CHANGES = {
    "eval_metrics [None]": (_set_metrics_none, TypeError, ["History.eval_metrics[0]", "None"]),
    "NaN loss appended": (_append_nan_loss, ValueError, ["History.loss[2]", "nan"]),
    "steps backwards": (_steps_backwards, ValueError, ["History.steps", "= 0"]),
    "metric a str": (_metric_not_a_number, TypeError, ["History.eval_metrics", "'high'"]),
    "eval step without metrics": (_eval_step_without_metrics, ValueError,
                                  ["History.eval_metrics", "History.eval_steps has 2"]),
}


@pytest.mark.parametrize("method", ["final_metrics", "metric", "to_dict"])
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_history_methods_check_fields_changed_after_it_was_built(change, method):
    mutate, error, words = CHANGES[change]
    history = _history()
    mutate(history)
    read = {"final_metrics": lambda: history.final_metrics, "metric": lambda: history.metric("acc"),
            "to_dict": history.to_dict}[method]
    raises_naming(error, words, read)


def test_history_final_metrics_is_a_copy():
    history = _history()
    history.final_metrics["acc"] = -1.0
    assert history.final_metrics == {"acc": 0.5} and "checks them all again" in type(history).__doc__


# -- g25: train_model refuses an infinite evaluate() metric; NaN is documented -------------------------
@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
@pytest.mark.parametrize("target_metric", [None, "acc"])
def test_train_model_refuses_an_infinite_metric(value, target_metric):
    from course_utils.model.train import TrainConfig, train_model

    tokens = torch.zeros(4, 8, dtype=torch.long)
    raises_naming(ValueError, ["evaluate(model)", repr(value), "'loss'", "step 1"],
            lambda: train_model(_model(), lambda g: (tokens, tokens), TrainConfig(steps=2), progress=False,
                                evaluate=lambda m: {"acc": 0.5, "loss": value}, eval_every=1,
                                target_metric=target_metric))


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_history_refuses_an_infinite_metric(value):
    from course_utils.model.train import History

    raises_naming(ValueError, ["History.eval_metrics[0]['loss']", repr(value)],
            lambda: History("t", eval_steps=[1], eval_metrics=[{"loss": value}]))


def test_train_model_documents_why_a_nan_metric_is_kept():
    """Refusing NaN would break a legitimate run: agreement_accuracy's 'attractor' is NaN at every
    evaluation of a task without attractor sentences. So it is warned about, kept, and documented."""
    from course_utils.model.train import train_model

    doc = " ".join(train_model.__doc__.split())
    assert "recorded as NaN, with a RuntimeWarning" in doc and 'templates=("simple",)' in doc
    tokens = torch.zeros(4, 8, dtype=torch.long)
    from course_utils.model.train import TrainConfig

    with pytest.warns(RuntimeWarning, match=r"NaN for \['attractor'\]"):
        history = train_model(_model(), lambda g: (tokens, tokens), TrainConfig(steps=1), progress=False,
                              evaluate=lambda m: {"attractor": float("nan")})
    assert history.final_metrics["attractor"] != history.final_metrics["attractor"]  # NaN, kept


# -- g07's root cause in model/: the configs a model and train_model check against are frozen ---------
def _train_config(**fields):
    from course_utils.model.train import TrainConfig

    return TrainConfig(**fields)


@pytest.mark.parametrize("make, field, value", [
    (lambda: ModelConfig(vocab_size=16, max_len=12), "vocab_size", 1000),
    (lambda: ModelConfig(vocab_size=16, max_len=12), "num_kv_heads", 3),
    (lambda: _train_config(steps=5), "steps", 10**9),
    (_train_config, "lr", float("nan")),
])
def test_configs_cannot_be_changed_after_they_were_checked(make, field, value):
    import dataclasses

    config = make()
    before = getattr(config, field)
    raises_naming(dataclasses.FrozenInstanceError, [field], lambda: setattr(config, field, value))
    assert getattr(config, field) == before
    changed = dataclasses.replace(config, **{field: before})  # a copy is the way to change one
    assert changed == config


def test_frozen_configs_still_fill_their_defaults():
    import dataclasses

    assert _train_config(steps=5).warmup_steps == 5 and _train_config().warmup_steps == 20
    config = ModelConfig(vocab_size=16, max_len=12, d_model=16, num_heads=4, mlp=True, d_mlp=8)
    assert config.num_kv_heads == 4 and config.d_mlp == 8
    raises_naming(ValueError, ["ModelConfig.num_kv_heads", "3"],
            lambda: dataclasses.replace(config, num_kv_heads=3))


# -- battery 18 (fix48rt) ----------------------------------------------------------------------------

def test_evaluate_induction_with_a_batch_that_misses_a_period():
    # a small batch can hold no sequence of some held-out period: that entry is NaN, not an error
    import math

    from course_utils.model.train import evaluate_induction, induction_model_config
    from course_utils.model.transformer import TinyTransformer

    torch.manual_seed(0)
    result = evaluate_induction(TinyTransformer(induction_model_config()), batch_size=1)
    periods = [k for k in result if k.startswith("period_")]
    assert len(periods) == 3 and any(math.isnan(result[k]) for k in periods)
    assert 0 <= result["heldout"] <= 1


# -- battery 20 (fix50q) -----------------------------------------------------------------------------

# -- S2: History.device is a device torch names (present on this machine or not) --------------
@pytest.mark.parametrize("device", ["gpu9", "", "CPU", "cuda:-1", "meta"])
def test_history_refuses_a_device_torch_cannot_name(device: str) -> None:
    raises_naming(ValueError, ["History.device", repr(device)], lambda: History("t", device=device))


def test_history_keeps_a_device_of_another_machine() -> None:
    assert History("t", device="cuda:3").device == "cuda:3"  # a GPU run's history read on a CPU


# -- battery 21 (fix51q) -----------------------------------------------------------------------------

# -- 1: History refuses fields that contradict each other, naming them ---------------------------
@pytest.mark.parametrize(("fields", "words"), [
    ({"target": 0.9}, ["History.target", "0.9", "History.target_metric", "None"]),
    ({"eval_steps": [5], "eval_metrics": [{"a": 1.0}], "target_metric": "a", "target": 0.5,
      "steps_to_target": 3, "seconds_to_target": 1.0},
     ["History.steps_to_target", "3", "History.eval_steps", "[5]"]),
    ({"steps": [1], "loss": [1.0], "eval_steps": [5], "eval_metrics": [{"a": 1.0}]},
     ["History.eval_steps", "[5]", "History.steps", "(1)"]),
])
def test_history_refuses_contradicting_fields(fields: dict, words: list[str]) -> None:
    raises_naming(ValueError, words, lambda: History("t", **fields))


def test_history_keeps_what_train_model_records() -> None:
    """A target reached at an evaluation, and an evaluation curve without its loss, still go in."""
    history = History("t", steps=[1, 2], loss=[1.0, 0.5], eval_steps=[1, 2],
                      eval_metrics=[{"a": 0.1}, {"a": 0.9}], target_metric="a", target=0.5,
                      steps_to_target=2, seconds_to_target=0.1)
    assert history.to_dict()["steps_to_target"] == 2
    assert History("t", eval_steps=[1], eval_metrics=[{"a": 0.5}], target_metric="a").metric("a") == [0.5]


# -- 2: a NumPy int seed is used as the int it equals --------------------------------------------
@pytest.mark.parametrize("seed", [np.int64(3), np.int32(3), np.uint8(3)])
def test_train_model_takes_a_numpy_int_seed(seed: np.integer) -> None:
    def run(seed: object) -> list[torch.Tensor]:
        drawn: list[torch.Tensor] = []

        def sample(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
            tokens = torch.randint(0, CFG.vocab_size, (2, 5), generator=generator)
            drawn.append(tokens)
            return tokens, tokens

        torch.manual_seed(0)
        train_model(TinyTransformer(CFG), sample, TrainConfig(steps=2), seed=seed, progress=False)
        return drawn

    assert all(torch.equal(a, b) for a, b in zip(run(seed), run(int(seed)), strict=True))


# -- battery 22 (fix52q) -----------------------------------------------------------------------------

# -- 9: an empty label is refused where it is printed or recorded ---------------------------------
@pytest.mark.parametrize("label", [""])
def test_history_refuses_an_empty_task(label: str) -> None:
    raises_naming(ValueError, ["History.task", repr(label)], lambda: History(label))


# -- battery 24 (fix54a) -----------------------------------------------------------------------------

# -- O1 / S2: Block.forward(x, heads=...) checked neither heads against x nor need_weights ------------
def _block_and_heads():
    from course_utils.model.transformer import Block, ModelConfig

    torch.manual_seed(0)
    block = Block(ModelConfig(vocab_size=8, d_model=16, num_heads=4, num_layers=1, max_len=8))
    return block, torch.randn(2, 5, 16), torch.randn(2, 4, 5, 4)


@pytest.mark.parametrize("heads, error, shown", [
    (torch.randn(3, 4, 5, 4), ValueError, "(3, 4, 5, 4)"),  # another batch
    (torch.randn(2, 4, 6, 4), ValueError, "(2, 4, 6, 4)"),  # another length
    (torch.randn(2, 4, 5, 4, dtype=torch.float64), TypeError, "torch.float64"),
    (torch.randn(2, 4, 5, 4, device="meta"), ValueError, "meta"),
    (torch.randn(2, 4, 5), ValueError, "3-D"),
])
def test_block_checks_heads_against_x(heads: torch.Tensor, error: type, shown: str) -> None:
    block, x, good = _block_and_heads()
    assert block(x, heads=good)[0].shape == x.shape  # the control
    raises_naming(error, ["heads", shown], lambda: block(x, heads=heads))


@pytest.mark.parametrize("bad", ["yes", None, 2, torch.tensor([True, False])])
def test_block_checks_need_weights_with_heads(bad: object) -> None:
    block, x, heads = _block_and_heads()
    raises_naming(TypeError, ["need_weights", type(bad).__name__],
                  lambda: block(x, heads=heads, need_weights=bad))


# -- S4: History(target_metric=<a name no evaluation holds>) could never reach its target -------------
@pytest.mark.parametrize("target_metric", ["bogus_value", "", "ACC"])
@pytest.mark.parametrize("target", [0.9, None])
def test_history_target_metric_must_be_an_evaluated_metric(target_metric: str, target: float | None) -> None:
    from course_utils.model.train import History

    fields = {"task": "t", "steps": [1, 2], "loss": [1.0, 0.5], "eval_steps": [1, 2],
              "eval_metrics": [{"acc": 0.5}, {"acc": 0.7}], "target": target}
    assert History(**fields, target_metric="acc").metric("acc") == [0.5, 0.7]  # the control
    raises_naming(ValueError, ["History.target_metric", repr(target_metric), "['acc']"],
                  lambda: History(**fields, target_metric=target_metric))


def test_history_target_metric_missing_from_one_evaluation() -> None:
    from course_utils.model.train import History

    raises_naming(ValueError, ["History.target_metric", "'acc'", "History.eval_metrics[1]", "['loss']"],
                  lambda: History("t", eval_steps=[1, 2], eval_metrics=[{"acc": 0.5}, {"loss": 1.0}],
                                  target_metric="acc"))
    assert History("t", target_metric="acc").eval_metrics == []  # as train_model builds it


# -- battery 26 (fix56) ------------------------------------------------------------------------------

def test_training_inside_no_grad_still_trains_and_inference_mode_is_named() -> None:
    from course_utils.model.train import TrainConfig, train_model
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    def model() -> TinyTransformer:
        torch.manual_seed(0)
        return TinyTransformer(ModelConfig(vocab_size=8, max_len=6, d_model=8, num_heads=2, num_layers=1))

    tokens = torch.randint(0, 8, (4, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        history = train_model(model(), lambda g: (tokens, tokens), TrainConfig(steps=2), progress=False)
    assert len(history.loss) == 2 and history.loss[1] < history.loss[0]
    with torch.inference_mode():
        raises_naming(RuntimeError, ["train_model", "torch.inference_mode()", "outside"],
                      lambda: train_model(model(), lambda g: (tokens, tokens), TrainConfig(steps=2),
                                          progress=False))


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_sparse_tensors_are_named() -> None:
    from course_utils import padding_mask

    model = tiny_model()
    raises_naming(TypeError, ["lengths", "dense", "sparse_coo", "to_dense()"],
                  lambda: padding_mask(torch.tensor([1, 2]).to_sparse()))
    raises_naming(TypeError, ["tokens", "dense", "sparse_coo"],
                  lambda: model(torch.randint(0, 16, (2, 6)).to_sparse()))


def test_train_model_names_a_batch_whose_targets_are_all_ignored() -> None:
    from course_utils.model.train import TrainConfig, train_model

    model = tiny_model()

    def sample_batch(generator):
        return torch.zeros(2, 6, dtype=torch.long), torch.full((2, 6), -100)

    raises_naming(ValueError, ["sample_batch", "all -100", "step 1"],
                  lambda: train_model(model, sample_batch, TrainConfig(steps=2), progress=False))


# -- battery 28 (library) ----------------------------------------------------------------------------

def test_a_kv_cache_filled_with_gradients_on_can_be_deep_copied() -> None:
    import copy

    model = train_mode_tiny_model().eval()
    logits, cache = model.forward_with_cache(torch.randint(0, 12, (2, 3)))
    assert cache.layers[0][0].grad_fn is not None  # made outside torch.no_grad
    copied = copy.deepcopy(cache)
    assert copied.length == 3 and copied.layers[0][0] is not cache.layers[0][0]
    torch.testing.assert_close(copied.layers[1][1], cache.layers[1][1].detach())
    _, more = model.forward_with_cache(torch.randint(0, 12, (2, 1)), copied)  # still a cache of the model
    assert more.length == 4


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_train_model_stopped_early_puts_the_model_back_in_its_mode(stop: type) -> None:
    for was_training in (False, True):
        _stopped_at_step_3(stop, was_training)


def _stopped_at_step_3(stop: type, was_training: bool) -> None:
    from course_utils.model.train import TrainConfig, train_model

    model = train_mode_tiny_model().train(was_training)
    calls = []

    def sample_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        if len(calls) == 3:
            raise stop("stopped")
        tokens = torch.randint(0, 12, (2, 5), generator=generator)
        return tokens, tokens

    with pytest.raises(stop):
        train_model(model, sample_batch, TrainConfig(steps=5), progress=False)
    assert len(calls) == 3 and model.training is was_training


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_train_model_documents_an_interrupted_run():
    from course_utils.model.train import train_model

    doc = " ".join(train_model.__doc__.split())
    assert "keeps the steps it took" in doc
    assert "mode is put back" in doc


# -- battery 30 --------------------------------------------------------------------------------------

# -- run_blocks_names_resid: an inference-mode resid was called x -----------------------------------
def test_run_blocks_names_an_inference_mode_resid():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, max_len=4))
    with torch.inference_mode():
        resid = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=r"^resid was made under torch.inference_mode\(\)"):
        model.run_blocks(resid)
    with torch.no_grad():
        assert model.run_blocks(resid)[0].shape == (1, 3, 8)


# -- train_model_nan_weights: a NaN weight was blamed on the lr and the data ------------------------
def test_train_model_names_a_nan_weight():
    from course_utils.model.train import TrainConfig, train_model
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, max_len=4))
    with torch.no_grad():
        model.blocks[0].ln_attn.weight[0] = float("nan")
    tokens = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"model's weights \(blocks\.0\.ln_attn\.weight\) must hold finite"):
        train_model(model, lambda g: (tokens, tokens), TrainConfig(steps=1))


# -- battery 34 --------------------------------------------------------------------------------------

def test_train_out_a_bare_name_whose_checkpoint_stem_is_a_folder_is_named(tmp_path, monkeypatch):
    """checkpoint_paths refuses a stem that is a folder (save_checkpoint_folder_path): for a bare
    --out NAME that is data/checkpoints/NAME, which --out's own check (of ./NAME) does not see."""
    monkeypatch.setattr(CK, "CHECKPOINT_DIR", tmp_path / "store")
    (tmp_path / "store" / "toy").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^--out 'toy': name_or_path must name a checkpoint, got the fold"):
        TRN._check_out_writable("toy", "induction")


# -- battery 34: NumPy floats are numbers ------------------------------------------------------------

@pytest.mark.parametrize("field", ["lr", "weight_decay", "grad_clip"])
@pytest.mark.parametrize("number", [np.float32(0.5), np.float16(0.5), np.float64(0.5)])
def test_trainconfig_takes_any_numpy_float_as_the_python_float_it_is(field, number):
    """np.float32 was refused as "must be a number such as 0.01" while np.float64 (a float
    subclass) passed: one rule (validation.is_real) now decides, and the value is kept as a float."""
    config = TrainConfig(steps=3, **{field: number})
    assert getattr(config, field) == 0.5 and type(getattr(config, field)) is float


@pytest.mark.parametrize("field", ["lr", "weight_decay", "grad_clip"])
@pytest.mark.parametrize("value, error", [(True, TypeError), ("0.1", TypeError), (None, TypeError),
                                          (np.float32("nan"), ValueError), (np.float32(-1.0), ValueError)])
def test_trainconfig_still_refuses_bools_strs_and_nan_naming_the_field(field, value, error):
    with pytest.raises(error, match=rf"^TrainConfig\.{field} must be"):
        TrainConfig(steps=3, **{field: value})


@pytest.mark.parametrize("extra, listed", [({1: 2, "zz": 3}, "['zz', 1]"),
                                           ({None: 2, "a": 1}, "['a', None]")])
def test_model_config_from_dict_lists_unknown_keys_of_any_type(extra, listed) -> None:
    """Unknown keys were sorted as they were: an int or None among str keys raised "'<' not
    supported between instances of 'str' and 'int'" instead of naming them (battery 34)."""
    from course_utils.model.transformer import ModelConfig

    with pytest.raises(ValueError) as info:
        ModelConfig.from_dict({"vocab_size": 11, "max_len": 8, **extra})
    assert f"unknown ModelConfig keys {listed}" in str(info.value), info.value
