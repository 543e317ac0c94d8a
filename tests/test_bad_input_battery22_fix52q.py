"""Battery 22a's model cases (issue 38): empty labels in History and save_checkpoint, a float64
model narrowed by save_checkpoint, repeatable_step rewinding a cache stepped elsewhere, and
concurrent saves and loads of one checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils.model import checkpoint as C
from course_utils.model.train import History
from course_utils.model.transformer import ModelConfig, TinyTransformer
from tests.bad_input_cases import raises_naming

CFG = ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1)


# -- 9: an empty label is refused where it is printed or recorded ---------------------------------
@pytest.mark.parametrize("label", [""])
def test_history_refuses_an_empty_task(label: str) -> None:
    raises_naming(ValueError, ["History.task", repr(label)], lambda: History(label))


@pytest.mark.parametrize("command", ["", "   "])
def test_save_checkpoint_refuses_an_empty_command(tmp_path: Path, command: str) -> None:
    raises_naming(ValueError, ["command", repr(command)],
                  lambda: C.save_checkpoint(TinyTransformer(CFG), tmp_path / "m", task="toy", metrics={},
                                            command=command))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


# -- 7: save_checkpoint refuses a float64 weight instead of narrowing it to float32 ---------------
def _with_float64(which: str) -> tuple[TinyTransformer, str]:
    """A model with float64 weights (all, or one parameter), and the name the error must give."""
    torch.manual_seed(0)
    model = TinyTransformer(CFG)
    if which == "all":
        return model.double(), "token_embedding.weight"
    name, parameter = next((n, p) for n, p in model.named_parameters() if n.endswith("bias"))
    parameter.data = parameter.data.double()
    return model, name


@pytest.mark.parametrize("which", ["all", "one"])
def test_save_checkpoint_refuses_float64_weights(tmp_path: Path, which: str) -> None:
    model, name = _with_float64(which)
    raises_naming(TypeError, [name, "torch.float64", "float32", "model.float()"],
                  lambda: C.save_checkpoint(model, tmp_path / "m", task="toy", metrics={}, command="c"))
    assert list(tmp_path.iterdir()) == []  # refused before anything was written
    C.save_checkpoint(model.float(), tmp_path / "m", task="toy", metrics={}, command="c")  # the way out
    assert next(C.load_checkpoint(tmp_path / "m")[0].parameters()).dtype == torch.float32


# -- 6: repeatable_step refuses to rewind a cache stepped elsewhere -------------------------------
@pytest.mark.parametrize("kind", ["cat", "preallocated", "window", "quantized"])
def test_repeatable_step_refuses_a_cache_stepped_elsewhere(kind: str) -> None:
    from course_utils.model import kv_cache as K

    torch.manual_seed(0)
    model = TinyTransformer(CFG).eval()
    token = torch.zeros(2, 1, dtype=torch.long)
    with torch.no_grad():
        _, prefix = model.forward_with_cache(torch.zeros(2, 3, dtype=torch.long))
    layers = list(prefix.layers)
    cache = {"cat": lambda: K.CatCache.from_layers(layers),
             "preallocated": lambda: K.PreallocatedCache.from_layers(layers, max_len=8),
             "window": lambda: K.SlidingWindowCache.from_layers(layers, window=4),
             "quantized": lambda: K.QuantizedCache.from_layers(layers, max_len=8, group=4)}[kind]()
    step = K.repeatable_step(model, cache, token)
    step()  # its own steps leave the cache as it was: no refusal
    with torch.no_grad():
        K.decode_step(model, token, cache)  # a step of someone else's
    raises_naming(ValueError, ["cache", "length 3 then, 4 now"], step)
    assert cache.length == 4  # the other step's token was kept, not rewound
