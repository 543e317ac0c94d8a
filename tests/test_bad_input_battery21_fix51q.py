"""Battery 21a's model cases (issue 38): an interrupted save_checkpoint leaves the folders it
made, History fields that contradict each other, a NumPy int seed in train_model, and a
QuantizedCache that casts keys/values of another dtype."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.kv_cache import QuantizedCache
from course_utils.model.train import History, TrainConfig, train_model
from course_utils.model.transformer import ModelConfig, TinyTransformer
from tests.bad_input_cases import raises_naming

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


# -- 15: a save stopped anywhere after its first folder was made removes the folders it made ----
def _stop_after(target: object, name: str, monkeypatch: pytest.MonkeyPatch,
                error: type[BaseException]) -> None:
    """``target.name`` does its work, then raises ``error`` (an interruption landing just after it)."""
    original = getattr(target, name)

    def stopped(*args: object, **kwargs: object) -> object:
        original(*args, **kwargs)
        raise error("stopped here")

    monkeypatch.setattr(target, name, stopped)


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
@pytest.mark.parametrize("where", ["mkdir", "config", "weights", "sidecar"])
def test_an_interrupted_save_removes_the_folders_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         where: str, error: type[BaseException]) -> None:
    torch.manual_seed(0)
    model = TinyTransformer(CFG)
    target = {"mkdir": (Path, "mkdir"), "config": (ModelConfig, "to_dict"), "weights": (C, "save_file"),
              "sidecar": (C, "_write_new")}[where]
    _stop_after(*target, monkeypatch, error)
    with pytest.raises(error, match="stopped here"):
        C.save_checkpoint(model, tmp_path / "new" / "deeper" / "m", task="toy", metrics={}, command="c")
    monkeypatch.undo()
    assert sorted(tmp_path.rglob("*")) == []


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


# -- 6: QuantizedCache refuses keys and values of another dtype, as the other caches do ----------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_quantized_cache_refuses_another_dtype(dtype: torch.dtype) -> None:
    cache = QuantizedCache(2, 2, 4, 4, 8, group=4)
    k = torch.randn(2, 4, 1, 4).to(dtype)
    raises_naming(TypeError, ["k_new", str(dtype), "torch.float32"], lambda: cache.append(0, k, k))
    assert cache.length == 0 and cache._next_layer == 0  # nothing written: the next append goes on
    assert cache.append(0, k.float(), k.float())[0].shape == (2, 4, 1, 4)
    raises_naming(TypeError, ["k_new", str(dtype)],
                  lambda: QuantizedCache.from_layers([(k, k), (k, k)], max_len=8, group=4))
