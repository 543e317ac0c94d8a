"""Battery 18 (b18a) fixes of helper fix48rm, in course_utils/model.

g01: train_model's sample_batch output was checked by the model's forward, named 'tokens';
g03: checkpoint.save_file handed bad tensors / filename to safetensors and pathlib; g07: a
History changed after it was built answered from the changed fields; g24: QuantizedCache took a
group longer than max_len (nothing ever quantized); g25: train_model kept an infinite evaluate()
metric without a word; g26: the task model configs took a vocab_size / max_len the task cannot fit.
"""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.model.transformer import ModelConfig, TinyTransformer

SMALL = ModelConfig(vocab_size=16, max_len=12, d_model=16, num_heads=2, num_layers=2)


def _model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(SMALL)


_raises = raises_naming  # call() raises error naming every one of words

# -- g24: QuantizedCache's group fits in max_len ------------------------------------------------------
@pytest.mark.parametrize("max_len, group", [(10, 32), (10, 11), (1, 2), (31, 32)])
def test_quantized_cache_refuses_a_group_longer_than_max_len(max_len, group):
    from course_utils.model.kv_cache import QuantizedCache

    options = {} if group == 32 else {"group": group}  # 32 is the default
    _raises(ValueError, ["group", f"max_len={max_len}", f"group={group}", "never fill"],
            lambda: QuantizedCache(1, 1, 2, 8, max_len, **options))


@pytest.mark.parametrize("max_len, group", [(10, 10), (32, 32), (10, 8)])
def test_quantized_cache_takes_a_group_up_to_max_len(max_len, group):
    from course_utils.model.kv_cache import QuantizedCache

    cache = QuantizedCache(1, 1, 2, 8, max_len, group=group)
    x = torch.randn(1, 2, max_len, 8, generator=torch.Generator().manual_seed(0))
    k, _ = cache.append(0, x, x)
    assert not torch.equal(k[:, :, :group], x[:, :, :group])  # the first group was quantized


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
    _raises(ValueError, [function, f"{field}=4", f"{field} >= {needed}", "does not fit the task"],
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
    _raises(ValueError, ["sample_batch(generator)'s tokens at step 1", *words],
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
    _raises(error, words, read)


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
    _raises(ValueError, ["evaluate(model)", repr(value), "'loss'", "step 1"],
            lambda: train_model(_model(), lambda g: (tokens, tokens), TrainConfig(steps=2), progress=False,
                                evaluate=lambda m: {"acc": 0.5, "loss": value}, eval_every=1,
                                target_metric=target_metric))


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_history_refuses_an_infinite_metric(value):
    from course_utils.model.train import History

    _raises(ValueError, ["History.eval_metrics[0]['loss']", repr(value)],
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


# -- g03: checkpoint.save_file checks its arguments before safetensors and the file system -----------
@pytest.mark.parametrize("tensors, filename, metadata, error, words", [
    ({"a": "x"}, "w.safetensors", {}, TypeError, ["tensors['a']", "torch.Tensor", "str"]),
    ({3: torch.zeros(2)}, "w.safetensors", {}, TypeError, ["tensors' keys", "int 3"]),
    (None, "w.safetensors", {}, TypeError, ["tensors must be a dict", "NoneType"]),
    ({"a": torch.zeros(2, device="meta")}, "w.safetensors", {}, ValueError, ["tensors['a']", "meta"]),
    ({"a": torch.zeros(2)}, None, {}, TypeError, ["filename", "None"]),
    ({"a": torch.zeros(2)}, 3, {}, TypeError, ["filename", "int"]),
    ({"a": torch.zeros(2)}, "w.safetensors", {"k": 3}, TypeError, ["metadata", "str -> str", "{'k': 3}"]),
    ({"a": torch.zeros(2)}, "w.safetensors", None, TypeError, ["metadata", "NoneType"]),
])
def test_save_file_names_a_bad_argument_and_writes_nothing(tmp_path, monkeypatch, tensors, filename,
                                                           metadata, error, words):
    from course_utils.model.checkpoint import save_file

    monkeypatch.chdir(tmp_path)
    _raises(error, words, lambda: save_file(tensors, filename, metadata))
    assert list(tmp_path.iterdir()) == []


def test_save_file_still_writes_good_tensors(tmp_path):
    from safetensors.torch import load_file

    from course_utils.model.checkpoint import save_file

    save_file({"a": torch.arange(3.0)}, tmp_path / "w.safetensors", {"k": "v"})
    assert torch.equal(load_file(tmp_path / "w.safetensors")["a"], torch.arange(3.0))


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
    _raises(dataclasses.FrozenInstanceError, [field], lambda: setattr(config, field, value))
    assert getattr(config, field) == before
    changed = dataclasses.replace(config, **{field: before})  # a copy is the way to change one
    assert changed == config


def test_frozen_configs_still_fill_their_defaults():
    import dataclasses

    assert _train_config(steps=5).warmup_steps == 5 and _train_config().warmup_steps == 20
    config = ModelConfig(vocab_size=16, max_len=12, d_model=16, num_heads=4, mlp=True, d_mlp=8)
    assert config.num_kv_heads == 4 and config.d_mlp == 8
    _raises(ValueError, ["ModelConfig.num_kv_heads", "3"],
            lambda: dataclasses.replace(config, num_kv_heads=3))
